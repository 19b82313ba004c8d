// `linac verify SPEC`: the spec's generated kernels against the float64 oracle.
#include "Args.h"
#include "Commands.h"
#include "KernelLookup.h"

#include "linac/Spec/SpecParser.h"
#include "verify/verify.h"

#include <iostream>
#include <sstream>

namespace linac::cli {
namespace {

std::vector<kernels::DType> parseDtypes(const std::string& text) {
  std::vector<kernels::DType> out;
  std::stringstream ss(text);
  std::string d;
  while (std::getline(ss, d, ',')) {
    if (d == "fp32" || d == "f32") out.push_back(kernels::DType::F32);
    else if (d == "bf16") out.push_back(kernels::DType::BF16);
    else if (d == "fp16" || d == "f16") out.push_back(kernels::DType::F16);
    else throw UsageError("unknown dtype '" + d + "' in --dtypes; valid: fp32, bf16, fp16");
  }
  if (out.empty()) throw UsageError("--dtypes needs at least one dtype");
  return out;
}

}  // namespace

bool runtimeAvailable() { return true; }

int runVerify(int argc, char** argv) {
  Args args = parseArgs(argc, argv, 2, {"backend", "shapes", "seed", "dtypes", "chunk"}, {});
  if (args.positional.size() != 1) throw UsageError("expected exactly one SPEC file");
  spec::VariantSpec spec = spec::loadVariant(args.positional[0]);
  if (spec.kind == spec::VariantKind::Attention)
    throw UsageError("'" + spec.name + "' is full attention: it runs through SDPA, there is no "
                     "generated recurrence to verify");
  const runtime::VariantKernels& kernels = requireKernels(spec, args.positional[0]);

  verify::Options options;
  options.backend = args.get("backend", "cpu");
  options.seed = static_cast<uint64_t>(args.getInt("seed", 0));
  options.chunk = args.getInt("chunk", 0);
  if (args.has("dtypes")) options.dtypes = parseDtypes(args.get("dtypes", ""));
  if (args.has("shapes")) {
    options.shapes.clear();
    std::stringstream ss(args.get("shapes", ""));
    std::string one;
    try {
      while (std::getline(ss, one, ';')) options.shapes.push_back(verify::parseShape(one));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--shapes: ") + e.what());
    }
  }
  verify::Report report = verify::run(spec, kernels, options, std::cout);
  verify::printReport(report, std::cout);
  return report.passed() ? 0 : 1;
}

}  // namespace linac::cli
