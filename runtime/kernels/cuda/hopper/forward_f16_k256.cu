// Hopper forward stages for f16 inputs, dk = 256 (decay none / fixed / scalar, both update rules;
// LINAC_HOPPER_WIDE=0 sends them back to the mma.sync kernels, forward.cu).
#include "forward_stages.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_FORWARD_INSTANTIATE_STAGES(cutlass::half_t, 256)
}  // namespace linac::kernels::cuda::hopper
