// Hopper forward stages for f16 inputs, dk = 64 (every decay class, both update rules).
#include "forward_stages.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_FORWARD_INSTANTIATE(cutlass::half_t, 64)
}  // namespace linac::kernels::cuda::hopper
