// Hopper gradient stage of the diagonal decay, fp16 inputs: dk and dv in {64, 128}.
#include "diag_grad.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_DIAG_GRAD_INSTANTIATE(cutlass::half_t)
}  // namespace linac::kernels::cuda::hopper
