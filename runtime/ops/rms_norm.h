// RMSNorm over the last dimension, with the residual add before it or a gate after it, as one op
// on CUDA: the fused kernels of runtime/kernels/cuda/rms_norm.cu, forward and backward, behind a
// torch autograd function; y comes out directly in the dtype its consumers read (autocast's, in
// training). The CPU (and a build without CUDA) composes ATen's rms_norm (model/layers.h).
#pragma once

#include <torch/types.h>

#include <utility>

namespace linac::ops {

/// Whether rmsNorm / addRmsNorm take these tensors: CUDA tensors (in a build with CUDA) on one
/// device, x [..., D], residual (undefined, or x's shape), weight [D] fp32, and an element-type
/// combination the kernels have: x, residual and y all fp32, all bf16 or all fp16, or x fp32
/// with residual and y both bf16 or both fp16 (`out` is y's dtype; with no residual, y's dtype
/// stands in for the residual's).
bool rmsNormSupported(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                      torch::ScalarType out);

/// x / sqrt(mean(x^2, -1) + eps) * weight in dtype `out`, computed in fp32. Differentiable with
/// respect to x and weight. Throws std::invalid_argument where rmsNormSupported is false.
torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, torch::ScalarType out);

/// {h, y}: h = x + residual in x's dtype, y = rmsNorm(h, weight, eps, out); one kernel each way.
/// Differentiable with respect to x, residual and weight (h's gradient from its later uses
/// included). Throws std::invalid_argument where rmsNormSupported is false.
std::pair<torch::Tensor, torch::Tensor> addRmsNorm(const torch::Tensor& x, const torch::Tensor& residual,
                                                   const torch::Tensor& weight, double eps, torch::ScalarType out);

/// Whether rmsNormGated takes these tensors: rmsNormSupported(x, none, weight, out), and a gate of
/// x's shape on x's device (any kernel dtype: it is read in `out`'s).
bool rmsNormGatedSupported(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& weight,
                           torch::ScalarType out);

/// rmsNorm(x, weight) * gate in dtype `out`, one kernel each way (fla's FusedRMSNormGated, with the
/// gate's activation left to whoever computed the gate). Differentiable with respect to x, weight
/// and gate. Throws std::invalid_argument where rmsNormGatedSupported is false.
torch::Tensor rmsNormGated(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& gate, double eps,
                           torch::ScalarType out);

}  // namespace linac::ops
