// Hopper backward of the diagonal decay, fp16 inputs, dk and dv in {64, 128} (dv 128 also in value
// blocks): the state passes (diag_state_scan.cuh) and the gradient stage's key and value kernels
// (diag_key_grad.cuh, diag_value_grad.cuh).
#include "diag_state_scan.cuh"
#include "diag_value_grad.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_DIAG_STATE_SCAN_INSTANTIATE(cutlass::half_t)
LINAC_HOPPER_DIAG_GRAD_INSTANTIATE(cutlass::half_t)
}  // namespace linac::kernels::cuda::hopper
