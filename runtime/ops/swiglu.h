// SwiGLU's activation product silu(g) * u as one op on CUDA: the fused kernel of
// runtime/kernels/cuda/swiglu.cu, forward and backward, behind a torch autograd function. The CPU
// (and a build without CUDA) composes torch::silu(g) * u (model::swiglu).
#pragma once

#include <torch/types.h>

namespace linac::ops {

/// Whether swigluProduct takes g and u: CUDA tensors (in a build with CUDA) of one shape and one
/// dtype among fp32 / bf16 / fp16.
bool swigluProductSupported(const torch::Tensor& g, const torch::Tensor& u);

/// silu(g) * u elementwise, computed in fp32 and rounded once to the inputs' dtype, for g and u
/// that swigluProductSupported takes. Differentiable with respect to both; nothing but g and u is
/// kept for the backward, which recomputes silu(g). Throws std::invalid_argument otherwise.
torch::Tensor swigluProduct(const torch::Tensor& g, const torch::Tensor& u);

}  // namespace linac::ops
