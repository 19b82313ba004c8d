// The float64 oracle: the recurrence of DESIGN.md section 3 evaluated token by token in LibTorch
// double precision, written from the semantics alone (it shares no code with any kernel; only the
// RecurrenceKind enums of the contract header). Everything is a differentiable torch expression,
// so gradients come from torch autograd through the token loop.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "kernels/common/recurrence.h"

namespace linac::oracle {

/// Inputs of one recurrence call in fla's layout; all tensors float64 on the CPU.
struct RecurrenceInputs {
  torch::Tensor q;     // [B, T, H, dk]
  torch::Tensor k;     // [B, T, H, dk]
  torch::Tensor v;     // [B, T, H, dv]
  torch::Tensor g;     // log-decay: undefined (none), [H] (fixed), [B, T, H] (scalar),
                       // [B, T, H, dk] (diagonal)
  torch::Tensor beta;  // [B, T, H] (delta rule)
  torch::Tensor u;     // [H, dk] (exclusive_bonus readout)
  torch::Tensor h0;    // [N, H, dk, dv] or undefined (zeros)
  double scale = 1.0;
  std::vector<int64_t> cu_seqlens;  // empty, or N + 1 offsets into T with B == 1 (packed varlen)
};

struct RecurrenceOutputs {
  torch::Tensor o;   // [B, T, H, dv]
  torch::Tensor ht;  // [N, H, dk, dv]
};

/// S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, or the delta rule
/// S_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T;
/// o_t = scale S_t^T q_t (inclusive) or scale (S_{t-1}^T q_t + ((q_t u k_t) . 1) v_t) (bonus).
RecurrenceOutputs recurrence(const kernels::RecurrenceKind& kind, const RecurrenceInputs& in);

struct ScanOutputs {
  torch::Tensor h;   // [B, T, D]
  torch::Tensor ht;  // [N, D]
};

/// HGRN vector scan h_t = exp(g_t) h_{t-1} + x_t. x, g: [B, T, D]; h0: [N, D] or undefined.
ScanOutputs scan(const torch::Tensor& x, const torch::Tensor& g, const torch::Tensor& h0,
                 const std::vector<int64_t>& cu_seqlens = {});

}  // namespace linac::oracle
