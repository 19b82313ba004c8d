// `linac verify SPEC`: the spec's generated kernels against the float64 oracle.
#include "Commands.h"
#include "KernelLookup.h"

#include "linac/Spec/SpecParser.h"
#include "verify/verify.h"

#include <torch/cuda.h>

#include <iostream>
#include <memory>

namespace linac::cli {
namespace {

struct VerifyFlags {
  std::string spec;
  std::string device = "cpu";
  std::string backend;              // --backend: the old name of --device (hidden)
  std::vector<std::string> shapes;  // --shape, each "B,T,H,dk,dv" (or several joined by ';')
  std::vector<std::string> oldShapes;  // --shapes: the old name of --shape (hidden)
  std::string dtypes = "fp32,bf16";
  int64_t seed = 0;
  int64_t chunk = 0;
};

std::vector<kernels::DType> parseDtypes(const std::string& text) {
  std::vector<kernels::DType> out;
  for (const std::string& d : splitList(text, ',', "--dtypes")) {
    if (d == "fp32" || d == "f32") out.push_back(kernels::DType::F32);
    else if (d == "bf16") out.push_back(kernels::DType::BF16);
    else if (d == "fp16" || d == "f16") out.push_back(kernels::DType::F16);
    else throw UsageError("unknown dtype '" + d + "' in --dtypes; valid: fp32, bf16, fp16");
  }
  return out;
}

/// `shape` as --shape writes it: "2,100,2,32,48".
std::string shapeFlag(const verify::Shape& s) {
  return std::to_string(s.batch) + "," + std::to_string(s.seqLen) + "," + std::to_string(s.heads) + "," +
         std::to_string(s.keyDim) + "," + std::to_string(s.valueDim);
}

int runVerify(const CLI::App& app, VerifyFlags& f) {
  if (given(app, "backend")) {
    std::cerr << "note: --backend is deprecated; use --device\n";
    if (given(app, "device")) throw UsageError("give --device only (--backend is its old name)");
    f.device = f.backend;
  }
  if (given(app, "shapes")) {
    std::cerr << "note: --shapes is deprecated; use --shape (repeatable)\n";
    f.shapes.insert(f.shapes.end(), f.oldShapes.begin(), f.oldShapes.end());
  }
  verify::Options options;
  options.backend = resolveDevice(f.device, torch::cuda::is_available());
  options.seed = static_cast<uint64_t>(f.seed);
  options.chunk = f.chunk;
  options.dtypes = parseDtypes(f.dtypes);
  if (given(app, "shape") || given(app, "shapes")) {
    if (f.shapes.empty()) throw UsageError("--shape needs a shape B,T,H,dk,dv");
    options.shapes.clear();
    try {
      for (const std::string& list : f.shapes)
        for (const std::string& one : splitList(list, ';', "--shape")) options.shapes.push_back(verify::parseShape(one));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--shape: ") + e.what());
    }
  }
  if (f.chunk < 0) throw UsageError("--chunk must be >= 0 (0: the variant's chunk hint)");

  spec::VariantSpec spec = spec::loadVariant(f.spec);
  if (spec.kind == spec::VariantKind::Attention)
    throw UsageError("'" + spec.name + "' is full attention: it runs through SDPA, there is no "
                     "generated recurrence to verify");
  const runtime::VariantKernels& kernels = requireKernels(spec, f.spec);
  verify::Report report = verify::run(spec, kernels, options, std::cout);
  verify::printReport(report, std::cout);
  return report.passed() ? 0 : 1;
}

}  // namespace

bool runtimeAvailable() { return true; }

Command addVerifyCommand(CLI::App& root) {
  auto f = std::make_shared<VerifyFlags>();
  CLI::App* app = root.add_subcommand("verify", "the spec's generated kernels against the float64 oracle");
  app->add_option("SPEC", f->spec, "the linear variant spec (YAML)")->required();
  addDeviceOption(*app, f->device);
  app->add_option("--shape", f->shapes,
                  "a shape to check, B,T,H,dk,dv (repeatable; several may be joined by ';')")
      ->default_str(shapeFlag(verify::Shape{}));
  app->add_option("--dtypes", f->dtypes, "comma-separated dtypes: fp32, bf16, fp16")->capture_default_str();
  app->add_option("--seed", f->seed, "the inputs' random seed; 0 draws one")->capture_default_str();
  app->add_option("--chunk", f->chunk, "the chunk length of the chunked kernels; 0: the variant's hint")
      ->capture_default_str();
  app->add_option("--backend", f->backend, "deprecated: --device")->check(CLI::IsMember(deviceChoices()))->group("");
  app->add_option("--shapes", f->oldShapes, "deprecated: --shape")->group("");
  return {app, [app, f](const std::vector<std::string>&) { return runVerify(*app, *f); }};
}

}  // namespace linac::cli
