// Hopper backward stages of the additive rule for f16 inputs at dk 256 (issue 11's D256 shape):
// the state passes, then the gradient's key and value stages (chunk_grad_keys.cuh,
// chunk_grad_values.cuh), every decay class but the diagonal one.
#include "backward_stages.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_WIDE_BACKWARD_INSTANTIATE(cutlass::half_t, 256)
}  // namespace linac::kernels::cuda::hopper
