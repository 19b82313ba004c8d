// Hopper forward stages for f16 inputs, dk = 256 (every decay class of the additive rule, the delta
// rule's but the diagonal; LINAC_HOPPER_WIDE=0 sends them back to the mma.sync kernels, forward.cu).
#include "forward_stages.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_FORWARD_INSTANTIATE(cutlass::half_t, 256)
}  // namespace linac::kernels::cuda::hopper
