// The Hopper forward's split form (forward_split.cuh) for f16 inputs: the additive rule, decay
// none / fixed / scalar, dk 64, 128 and 256.
#include "forward_split.cuh"

namespace linac::kernels::cuda::hopper {
LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE(cutlass::half_t)
}  // namespace linac::kernels::cuda::hopper
