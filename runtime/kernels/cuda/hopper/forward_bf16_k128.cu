// Hopper forward stages for bf16 inputs, dk = 128 (every decay class, both update rules).
#include "forward_stages.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_FORWARD_INSTANTIATE(cutlass::bfloat16_t, 128)
}  // namespace linac::kernels::cuda::hopper
