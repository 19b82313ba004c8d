// The L2 normalisation over the last dimension (fla's l2norm; q and k of the delta-rule variants)
// as one op on CUDA: the fused kernel of runtime/kernels/cuda/l2_norm.cu, forward and backward,
// behind a torch autograd function. The CPU (and a build without CUDA) composes torch ops
// (model::l2Normalize, prologue's composed roles).
#pragma once

#include <torch/types.h>

namespace linac::ops {

/// Whether l2Normalize takes x: a CUDA tensor (in a build with CUDA) of at least one dimension,
/// fp32 / bf16 / fp16, with a last dimension of at most 2^31 - 1 elements.
bool l2NormalizeSupported(const torch::Tensor& x);

/// x / sqrt(sum(x^2, -1) + eps), computed in fp32 and rounded once to x's dtype, for x that
/// l2NormalizeSupported takes. Differentiable; x and one fp32 value per row are kept for the
/// backward. Throws std::invalid_argument otherwise.
torch::Tensor l2Normalize(const torch::Tensor& x, double eps);

}  // namespace linac::ops
