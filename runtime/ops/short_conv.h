// The short causal depthwise convolution with its activation as one op on CUDA: the fused kernel
// of runtime/kernels/cuda/short_conv.cu, forward and backward, behind a torch autograd function.
// The CPU (and a build without CUDA) has no such kernel: model::causalConv with model::activate
// composes the same from torch::conv1d there.
#pragma once

#include "registry/layer.h"

#include <torch/types.h>

namespace linac::ops {

/// The widest convolution shortConv takes (fla's ShortConvolution uses 4).
constexpr int64_t kShortConvMaxWidth = 8;

/// Whether shortConv takes x and weight: x [B, T, C] fp32 / bf16 / fp16 on a CUDA device (in a
/// build with CUDA), weight [C, 1, W] floating on the same device, 1 <= W <= kShortConvMaxWidth.
bool shortConvSupported(const torch::Tensor& x, const torch::Tensor& weight);

/// act(z) with z_t = sum_j weight[c, 0, j] x[b, t - W + 1 + j, c] (x before t = 0 taken as 0):
/// torch::conv1d over time with W - 1 zeros of left padding, groups C, then the activation.
/// x [B, T, C] fp32 / bf16 / fp16 on a CUDA device; weight [C, 1, W] (any floating dtype, used in
/// fp32), 1 <= W <= kShortConvMaxWidth. Sums in fp32; the result has x's dtype. Differentiable
/// with respect to x and weight (gradients in their dtypes; the weight's summed in fp32 in a fixed
/// order). positions (packed documents, model/documents.h): int64 [B, T] on x's device, each
/// token's offset in its document; the term of lag W-1-j enters z_t only when W-1-j <=
/// positions[b, t], so no token reads the document before its own (undefined: every row is one
/// sequence). Throws std::invalid_argument for what shortConvSupported refuses and a misshapen
/// positions.
torch::Tensor shortConv(const torch::Tensor& x, const torch::Tensor& weight, runtime::Activation activation,
                        const torch::Tensor& positions = {});

}  // namespace linac::ops
