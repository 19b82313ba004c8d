// Internal to runtime/verify: the pieces each section shares.
#pragma once

#include "ops/recurrence_ops.h"
#include "verify/verify.h"

#include <torch/types.h>  // Tensor, ScalarType, Device, the ATen functions (not the umbrella header)

namespace linac::verify::detail {

torch::ScalarType scalarType(kernels::DType dtype);
const char* dtypeName(kernels::DType dtype);
double relRms(const torch::Tensor& x, const torch::Tensor& ref);
torch::Device device(const Options& options);

/// Records one comparison; an undefined `x` with a defined `ref` (or the reverse) is a failure.
void compare(Report& report, const std::string& section, const std::string& what,
             const std::string& setting, const torch::Tensor& x, const torch::Tensor& ref,
             double tol);

/// Records one comparison of a gradient that is a total over tokens: `contributions` holds the
/// oracle's per-token terms (leading dims B, T; `ref` is their sum over those), and the error is
/// ||x - ref|| / max(||ref||, ||contributions||) (verify.h), with the plain rel-RMS in the note.
void compareTotal(Report& report, const std::string& section, const std::string& what,
                  const std::string& setting, const torch::Tensor& x, const torch::Tensor& ref,
                  const torch::Tensor& contributions, double tol);

/// The recurrence's tensors in float64 (masters) and the same values as the kernel sees them.
struct CoreInputs {
  torch::Tensor q, k, v, g, beta, u, h0;  // float64 leaves (requires_grad)
};

/// Runs the kernels (through ops::recurrence / ops::scan) and the oracle on the same values
/// (q, k, v rounded to `dtype` for both), backpropagates the same random upstream gradients, and
/// records o, ht and every input gradient under `section`. `scale` is the readout scale.
void compareRecurrence(Report& report, const std::string& section, const std::string& setting,
                       const kernels::RecurrenceKind& kind, bool vectorState, const CoreInputs& in,
                       double scale, int64_t chunk, kernels::DType dtype, const Options& options);

void kernelSection(Report& report, const runtime::VariantKernels& kernels, const Shape& shape,
                   kernels::DType dtype, const Options& options, std::ostream& log);
void specSection(Report& report, const spec::VariantSpec& spec,
                 const runtime::VariantKernels& kernels, const Shape& shape, kernels::DType dtype,
                 const Options& options, std::ostream& log);
void fusedSection(Report& report, const spec::VariantSpec& spec,
                  const runtime::VariantKernels& kernels, const Shape& shape, kernels::DType dtype,
                  const Options& options, std::ostream& log);
void consistencySection(Report& report, const runtime::VariantKernels& kernels, const Shape& shape,
                        kernels::DType dtype, const Options& options, std::ostream& log);

}  // namespace linac::verify::detail
