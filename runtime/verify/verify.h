// `linac verify`: the generated kernels of a spec against the float64 oracle, on fresh random
// inputs. Four sections:
//   kernel       the recurrence alone with gates drawn as DESIGN.md asks (logsigmoid of N(0,1),
//                and harder draws clamped at -5 and -20), every output, final state and gradient
//   spec         end to end from the spec's raw inputs and parameters: the compiled prologue
//                (its generated functions and derivatives) feeding the kernels, against the spec
//                expressions evaluated by the oracle; gradients of every raw input and parameter
//   fused        the same from the raw operands through prologue::fusedRecurrence: on CUDA the
//                prologue computed inside the chunk kernel, elsewhere composed (variants with a
//                fused plan)
//   consistency  packed varlen vs separately-run sequences, and the chunked form vs the decode
//                step run token by token
// Tolerance on relative RMS error ||x - ref|| / ||ref||: 5e-3 for bf16/fp16, 1e-5 for fp32.
// A gradient that is a total over every token (a parameter broadcast over B and T, the fixed decay
// class's per-head g) is measured against the size of what was summed: ||x - ref|| / max(||ref||,
// ||c||), c the oracle's per-token contributions (ref = sum of c over tokens). A well-conditioned
// total (no cancellation: ||ref|| ~ ||c||) gets the plain number; a total that cancels to far below
// its terms is not charged for the rounding of terms no fp32 kernel can avoid. The plain rel-RMS is
// printed beside it.
#pragma once

#include "kernels/common/recurrence.h"
#include "linac/Spec/Spec.h"
#include "registry/registry.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace linac::verify {

struct Shape {
  int64_t batch = 2, seqLen = 100, heads = 2, keyDim = 32, valueDim = 48;
  std::string text() const;
};

/// Parses "B,T,H,dk,dv" (e.g. "2,100,2,32,48"); throws std::invalid_argument.
Shape parseShape(const std::string& text);

struct Options {
  std::string backend = "cpu";                  // cpu | cuda
  std::vector<Shape> shapes = {Shape{}};
  std::vector<kernels::DType> dtypes = {kernels::DType::F32, kernels::DType::BF16};
  uint64_t seed = 0;                            // 0: draw one from std::random_device
  int64_t chunk = 0;                            // 0: the variant's chunk hint
};

struct Check {
  std::string section;   // kernel | spec | fused | consistency
  std::string what;      // e.g. "o", "ht", "d q", "d A_log"
  std::string setting;   // dtype, shape, gate regime
  double error = 0.0;
  double tolerance = 0.0;
  bool ran = true;       // false: not available on this backend (note says why)
  std::string note;
  bool passed() const { return !ran || error <= tolerance; }  // NaN fails
};

struct Report {
  uint64_t seed = 0;
  std::vector<Check> checks;
  bool passed() const;
  int failures() const;
};

double tolerance(kernels::DType dtype);

/// Runs every section; progress lines go to `log`. Throws std::invalid_argument for a backend
/// this build lacks or shapes the spec cannot take.
Report run(const spec::VariantSpec& spec, const runtime::VariantKernels& kernels,
           const Options& options, std::ostream& log);

/// The table `linac verify` prints, then a one-line verdict.
void printReport(const Report& report, std::ostream& os);

}  // namespace linac::verify
