// Hopper backward of the delta rule for bf16 inputs at Gated DeltaNet's 340m / 1.3b heads (dk 256,
// dv 512) and at dk = dv = 256, decay none / scalar (a translation unit of its own: its five stages
// compile in parallel with the narrow ones).
#include "delta_backward_stages.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_DELTA_BACKWARD_INSTANTIATE(cutlass::bfloat16_t, 256, 512)
LINAC_HOPPER_DELTA_BACKWARD_INSTANTIATE(cutlass::bfloat16_t, 256, 256)
}  // namespace linac::kernels::cuda::hopper
