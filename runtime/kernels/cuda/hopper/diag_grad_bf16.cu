// Hopper backward of the diagonal decay, bf16 inputs, dk and dv in {64, 128}: the state passes and
// the gradient stage.
#include "diag_grad.cuh"
#include "diag_state_scan.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_DIAG_STATE_SCAN_INSTANTIATE(cutlass::bfloat16_t)
LINAC_HOPPER_DIAG_GRAD_INSTANTIATE(cutlass::bfloat16_t)
}  // namespace linac::kernels::cuda::hopper
