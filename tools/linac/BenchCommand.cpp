// `linac bench SPEC`: forward, forward+backward and decode-step timings of the spec's kernels.
#include "Commands.h"
#include "KernelLookup.h"

#include "bench/bench.h"
#include "linac/Spec/SpecParser.h"

#include <torch/cuda.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>

namespace linac::cli {
namespace {

constexpr size_t kShapeDims = 4;  // B,T,H,D

struct BenchFlags {
  std::string spec;
  std::string device = "auto";
  std::string backend;  // --backend: the old name of --device (hidden)
  std::vector<int64_t> shape;
  std::string json;
  bench::Options options;
};

int runBench(const CLI::App& app, BenchFlags& f) {
  bench::Options& o = f.options;
  if (given(app, "backend")) {
    std::cerr << "note: --backend is deprecated; use --device\n";
    if (given(app, "device")) throw UsageError("give --device only (--backend is its old name)");
    f.device = f.backend;
  }
  o.backend = resolveDevice(f.device, torch::cuda::is_available());
  if (o.iters < 1 || o.warmup < 0) throw UsageError("--iters must be >= 1 and --warmup >= 0");
  if (given(app, "shape")) {
    if (f.shape.size() != kShapeDims || *std::min_element(f.shape.begin(), f.shape.end()) <= 0)
      throw UsageError("--shape must be B,T,H,D (four positive integers)");
    o.batch = f.shape[0], o.seqLen = f.shape[1], o.heads = f.shape[2], o.headDim = f.shape[3];
  }
  std::ofstream json;
  if (given(app, "json")) {
    json.open(f.json, std::ios::app);
    if (!json) throw UsageError("cannot open --json file '" + f.json + "'");
  }
  spec::VariantSpec spec = spec::loadVariant(f.spec);
  const runtime::VariantKernels& kernels = requireKernels(spec, f.spec);
  auto timings = bench::run(spec, kernels, o);
  bench::print(spec.name, o, timings, std::cout, given(app, "json") ? &json : nullptr);
  return 0;
}

}  // namespace

Command addBenchCommand(CLI::App& root) {
  auto f = std::make_shared<BenchFlags>();
  bench::Options& o = f->options;
  CLI::App* app = root.add_subcommand("bench", "fwd, fwd+bwd and decode-step medians of the spec's kernels, "
                                               "with the memory floor");
  app->add_option("SPEC", f->spec, "the linear variant spec (YAML)")->required();
  addDeviceOption(*app, f->device);
  addIntListOption(*app, "--shape", f->shape, "B,T,H,D: batch, sequence length, heads, head dim")
      ->default_str(std::to_string(o.batch) + "," + std::to_string(o.seqLen) + "," + std::to_string(o.heads) + "," +
                    std::to_string(o.headDim));
  app->add_option("--dtype", o.dtype, "the inputs' dtype")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}))
      ->capture_default_str();
  app->add_option("--iters", o.iters, "timed iterations (the median is reported)")->capture_default_str();
  app->add_option("--warmup", o.warmup, "untimed iterations first")->capture_default_str();
  app->add_option("--json", f->json, "also append the timings to this file as JSON lines");
  app->add_option("--backend", f->backend, "deprecated: --device")->check(CLI::IsMember(deviceChoices()))->group("");
  return {app, [app, f](const std::vector<std::string>&) { return runBench(*app, *f); }};
}

}  // namespace linac::cli
