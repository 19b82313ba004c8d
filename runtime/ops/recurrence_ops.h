// Torch-facing recurrence ops: differentiable functions over the generated kernels (CPU kernels
// for CPU tensors, CUDA kernels for CUDA tensors when built with LINAC_ENABLE_CUDA). fla's
// interface: [B, T, H, D] contiguous tensors, optional cu_seqlens (B = 1), fp32 initial state
// [N, H, dk, dv], output_final_state. Everything unsupported (dtype, device, shape, layout) throws
// std::invalid_argument naming the argument and what was expected; nothing is computed silently
// wrong.
//
// Layout: the kernels need contiguous [B, T, H, D] memory. Non-contiguous inputs are accepted and
// copied to contiguous memory first (a silent copy, as torch ops do; pass contiguous tensors to
// avoid it). g, beta and u are likewise converted to contiguous fp32, and their gradients are
// cast back to the input's dtype. The one exception is recurrenceStep's `state`, which is updated
// in place and must therefore be contiguous fp32 already. cu_seqlens is validated on a CPU copy
// (int64, 1-D, B == 1, starts at 0, non-decreasing, ends at T); it may live on the CPU or on q's
// device. CUDA tensors need a build with LINAC_ENABLE_CUDA (LINAC_HAVE_CUDA), which runs the CUDA
// kernels both ways (ops/kernel_dispatch.h).
#pragma once

#include "kernels/common/recurrence.h"

#include <torch/types.h>

#include <optional>

namespace linac::ops {

struct RecurrenceOptions {
  kernels::RecurrenceKind kind;
  double scale = 1.0;
  int64_t chunk = 64;
  bool outputFinalState = false;
};

/// Inputs; tensors not used by the kind must be undefined.
///   q, k [B, T, H, dk], v [B, T, H, dv]: bf16 / fp16 / fp32, same dtype, same device
///   g: by decay class — none: undefined; fixed: [H]; scalar: [B, T, H]; diagonal: [B, T, H, dk]
///   beta [B, T, H] (delta), u [H, dk] (exclusive_bonus); g, beta, u any float dtype (used as fp32)
///   h0 [N, H, dk, dv] fp32 or undefined; cu_seqlens int64 [N + 1] or undefined
struct RecurrenceInputs {
  torch::Tensor q, k, v, g, beta, u, h0, cu_seqlens;
};

/// o [B, T, H, dv] in q's dtype, and ht [N, H, dk, dv] fp32 (undefined unless requested).
/// Differentiable with respect to q, k, v, g, beta, u and h0 through torch autograd; gradients
/// come from the generated backward kernels.
std::pair<torch::Tensor, torch::Tensor> recurrence(const RecurrenceInputs& in,
                                                   const RecurrenceOptions& options);

/// Gradients of the recurrence's inputs, as recurrence()'s backward computes them.
struct RecurrenceGrads {
  torch::Tensor q, k, v, g, beta, u, h0;
};

/// Which gradients recurrenceBackward computes (an unwanted one stays undefined).
struct RecurrenceWanted {
  bool q = true, k = true, v = true, g = true, beta = true, u = true, h0 = true;
};

/// The backward of recurrence() alone, outside autograd: the generated backward kernels on the
/// inputs' device, given d_o [B, T, H, dv] and d_ht [N, H, dk, dv] (undefined: zeros). Inputs as
/// for recurrence() (converted the same way); q, k, v gradients in q's dtype, g / beta / u / h0 in
/// fp32. For ops that compute the inputs themselves (prologue/fused_recurrence.h).
RecurrenceGrads recurrenceBackward(const RecurrenceInputs& in, const RecurrenceOptions& options,
                                   const torch::Tensor& d_o, const torch::Tensor& d_ht,
                                   const RecurrenceWanted& wanted);

/// One decode step: q, k [B, H, dk], v [B, H, dv], g per class ([H] / [B, H] / [B, H, dk]),
/// beta [B, H], u [H, dk]; state [B, H, dk, dv] fp32 updated in place. Returns o [B, H, dv].
/// Not differentiable (inference only).
torch::Tensor recurrenceStep(const RecurrenceInputs& in, torch::Tensor& state,
                             const RecurrenceOptions& options);

/// HGRN vector scan h_t = exp(g_t) h_{t-1} + x_t: x [B, T, D] (bf16/fp16/fp32), g [B, T, D]
/// (used as fp32), h0 [N, D] fp32 or undefined. Returns h [B, T, D] in x's dtype and ht [N, D]
/// (undefined unless requested). Differentiable with respect to x, g and h0.
std::pair<torch::Tensor, torch::Tensor> scan(const torch::Tensor& x, const torch::Tensor& g,
                                             const torch::Tensor& h0,
                                             const torch::Tensor& cu_seqlens,
                                             bool outputFinalState);

}  // namespace linac::ops
