// Arguments of the Hopper backward of the delta rule (delta_bwd_*.cuh). Tensors are contiguous
// [B, T, H, D] as in the forward (forward_params.h); chunk slots map chunks of every sequence to
// workspace rows (chunk_slots.cuh). "rows" = B * T token-heads, indexed (token * H + h).
// Workspaces are fp32 where the host transcription (tests/runtime/cuda/delta_bwd_host_check.py)
// showed that a bf16 copy breaks the 5e-3 gate: U / D, dD_local / dD, dS_{c+1}, X; W, S_c and dW
// are kept in the input dtype, as fla keeps h.
#pragma once

#include <cstdint>

namespace linac::kernels::cuda::hopper {

constexpr int kDeltaStateValueBlock = 32;  // value columns per CTA of the state passes (16 narrow)

struct DeltaBackwardParams {
  const void* q;          // [B, T, H, dk]
  const void* k;          // [B, T, H, dk]
  const void* v;          // [B, T, H, dv]
  const void* d_o;        // [B, T, H, dv]
  const float* g;         // None: null; Scalar [B, T, H]
  const float* beta;      // [B, T, H]
  const float* h0;        // [N, H, dk, dv] or null
  const float* d_ht;      // [N, H, dk, dv] or null
  // workspaces
  float* x;               // [slots, H, C, C]  X = (I + L)^-1 per chunk (row t, column s)
  void* w;                // [B, T, H, dk]  W = Tm (K . exp(b)) (input dtype)
  float* ud;              // [B, T, H, dv]  U = Tm V (stage 1), then D = U - W S_c (stage 2)
  float* dd;              // [B, T, H, dv]  dD_local = A'^T dO (stage 1), then dD (stage 3)
  void* states;           // [slots, H, dk, dv]  S_c, the state before chunk c (input dtype)
  float* dstates;         // [slots, H, dk, dv]  dS_{c+1}, the gradient after chunk c (stage 3;
                          // null with fused_reverse)
  float* dkpart;          // [B, T, H, dk]  dk from the state and intra-chunk terms (stage 4)
  void* dw;               // [B, T, H, dk]  dW = -dD S_c^T (stage 4, input dtype)
  float* dbpart;          // [B, T, H]  db_t from stage 4 (decay Scalar with dg), else null
  float* zpart;           // [slots, H]  the chunk term Z from stage 4, else null
  // gradients (any may be null except where a later stage needs them)
  void* dq;               // [B, T, H, dk]
  void* dk;               // [B, T, H, dk]
  void* dv;               // [B, T, H, dv]
  float* dg;              // Scalar [B, T, H] or null
  float* dbeta;           // [B, T, H] or null
  float* dh0;             // [N, H, dk, dv] or null
  const int64_t* cu_seqlens;  // [N + 1] (device) or null
  int64_t seq_len;        // T
  int64_t chunks_per_seq; // ceil(T / C) (padded batches)
  int num_seqs;           // N
  int heads;              // H
  int value_dim;          // dv
  float scale;
  bool block_inverse;     // stage 1's X = (I + L)^-1 by two 32-row halves (unit_lower_inverse.cuh),
                          // as the forward's; false (LINAC_HOPPER_BLOCK_INVERSE=0): one column
                          // per thread
  bool fused_reverse;     // stages 3 and 4 as one reverse pass with dS on chip
                          // (delta_bwd_reverse_grad.cuh; dk, dv <= 128), no dstates workspace
  bool narrow_state;      // the state passes in value blocks of 16 columns instead of 32 (a
                          // grid below the SM count; backward.cu says when)
};

}  // namespace linac::kernels::cuda::hopper
