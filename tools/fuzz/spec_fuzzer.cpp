// Feeds arbitrary bytes to every text entry point of the spec front end. The contract under
// test: bad input of any kind is reported as a SpecError; any other exception, a crash, a leak
// or undefined behaviour is a bug.
#include "linac/Spec/Diagnostic.h"
#include "linac/Spec/SpecParser.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

namespace {

template <typename F>
void expectOnlySpecErrors(const char* entry, F&& f) {
  try {
    f();
  } catch (const linac::spec::SpecError&) {
    // The expected outcome for bad input.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw a non-SpecError exception: %s\n", entry, e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s threw a non-std exception\n", entry);
    std::abort();
  }
}

// A representative layer count for expanding parsed schedules.
constexpr int64_t kLayers = 24;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace linac::spec;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  expectOnlySpecErrors("parseVariant", [&] {
    VariantSpec v = parseVariant(text, "fuzz.yaml");
    // Exercise what consumers do with a valid spec.
    for (const DefSpec& d : v.defs) (void)toString(*d.expr);
    (void)v.keyDim.resolve(1024, v.heads);
    (void)v.valueDim.resolve(1024, v.heads);
  });
  expectOnlySpecErrors("parseSchedule", [&] { (void)parseSchedule(text, SourceLoc{"fuzz", 1, 1}).expand(kLayers); });
  expectOnlySpecErrors("parseScheduleFile", [&] { (void)parseScheduleFile(text, "fuzz.yaml").expand(kLayers); });
  expectOnlySpecErrors("parsePreset", [&] { (void)parsePreset(text, "fuzz.yaml"); });
  expectOnlySpecErrors("parseExpr", [&] { (void)toString(*parseExpr(text, SourceLoc{"fuzz", 1, 1})); });
  return 0;
}
