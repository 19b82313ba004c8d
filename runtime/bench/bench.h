// `linac bench`: timings of a spec's generated kernels through the same ops training uses.
// Forward, forward+backward and one decode step, as medians of device-event timings (CUDA) or
// wall-clock (CPU) after warm-up, with the memory floor (each input read once, each output
// written once, at the measured copy bandwidth) for scale.
#pragma once

#include "linac/Spec/Spec.h"
#include "registry/registry.h"

#include <ostream>
#include <string>
#include <vector>

namespace linac::bench {

struct Options {
  std::string backend = "cuda";
  int64_t batch = 8, seqLen = 4096, heads = 8, headDim = 128;  // DESIGN.md's anchor shape
  std::string dtype = "bf16";
  int warmup = 5;
  int iters = 30;
  /// Device copy bandwidth measured on the H200 (DESIGN.md section 8), bytes per second.
  double bandwidth = 4.25e12;
};

struct Timing {
  std::string what;      // fwd | fwd+bwd | step | fused fwd | composed fwd | ...
  double medianMs = 0.0;
  double floorMs = 0.0;  // memory floor
  bool ran = true;
  std::string note;      // why it did not run
};

/// fwd, fwd+bwd and step of the recurrence on materialised inputs; then, for a variant with a
/// fused plan, the same from the spec's raw operands: "raw fwd" / "raw fwd+bwd" with the prologue
/// inside the chunk kernel (CUDA) and "composed ..." with it as separate passes.
std::vector<Timing> run(const spec::VariantSpec& spec, const runtime::VariantKernels& kernels,
                        const Options& options);

/// The table, and a JSON line per timing when `json` is non-null.
void print(const std::string& name, const Options& options, const std::vector<Timing>& timings,
           std::ostream& os, std::ostream* json);

}  // namespace linac::bench
