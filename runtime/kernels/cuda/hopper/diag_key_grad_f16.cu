// Hopper backward of the diagonal decay by key block, fp16 inputs: the key and value stages
// (diag_key_grad.cuh, diag_value_grad.cuh) at dk and dv in {64, 128}, dv 128 also in value blocks.
#include "diag_value_grad.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_DIAG_KEY_GRAD_INSTANTIATE(cutlass::half_t)
}  // namespace linac::kernels::cuda::hopper
