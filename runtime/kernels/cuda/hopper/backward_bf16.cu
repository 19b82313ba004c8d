// Hopper backward stages for bf16 inputs: dk and dv in {64, 128}, every decay class.
#include "backward_stages.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_BACKWARD_INSTANTIATE(cutlass::bfloat16_t, 64, 64)
LINAC_HOPPER_BACKWARD_INSTANTIATE(cutlass::bfloat16_t, 64, 128)
LINAC_HOPPER_BACKWARD_INSTANTIATE(cutlass::bfloat16_t, 128, 64)
LINAC_HOPPER_BACKWARD_INSTANTIATE(cutlass::bfloat16_t, 128, 128)
}  // namespace linac::kernels::cuda::hopper
