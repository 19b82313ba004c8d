// Hopper backward of the delta rule for fp16 inputs: dk and dv in {64, 128}, decay none / scalar.
#include "delta_backward_stages.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_DELTA_BACKWARD_INSTANTIATE(cutlass::half_t, 64, 64)
LINAC_HOPPER_DELTA_BACKWARD_INSTANTIATE(cutlass::half_t, 64, 128)
LINAC_HOPPER_DELTA_BACKWARD_INSTANTIATE(cutlass::half_t, 128, 64)
LINAC_HOPPER_DELTA_BACKWARD_INSTANTIATE(cutlass::half_t, 128, 128)
}  // namespace linac::kernels::cuda::hopper
