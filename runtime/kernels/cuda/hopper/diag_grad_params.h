// Arguments of the Hopper gradient stage of the diagonal decay (diag_grad.cuh). Tensors are
// contiguous [B, T, H, D] as in the forward (forward_params.h); the two state workspaces are the
// mma.sync path's pass 1 outputs (chunk_backward_diagonal.cu), fp32, one row per chunk slot
// (chunk_slots.cuh).
#pragma once

#include <cstdint>

namespace linac::kernels::cuda::hopper {

struct DiagGradParams {
  const void* q;          // [B, T, H, dk]
  const void* k;          // [B, T, H, dk]
  const void* v;          // [B, T, H, dv]
  const void* d_o;        // [B, T, H, dv]
  const float* g;         // [B, T, H, dk] log-decay
  const float* u;         // [H, dk] (exclusive readout) or null
  const float* states;    // [slots, H, dk, dv] fp32 S_c, the state before chunk c
  const float* dstates;   // [slots, H, dk, dv] fp32 dS_{c+1}, the gradient after chunk c
  void* dq;               // [B, T, H, dk] or null
  void* dk;               // [B, T, H, dk] or null
  void* dv;               // [B, T, H, dv] or null
  float* dg;              // [B, T, H, dk] or null
  float* du_part;         // [slots, H, dk] d_u partials (exclusive, d_u wanted) or null
  const int64_t* cu_seqlens;  // [N + 1] (device) or null
  int64_t seq_len;        // T
  int64_t chunks_per_seq; // ceil(T / C) (padded batches)
  int num_seqs;           // N
  int heads;              // H
  int value_dim;          // dv
  float scale;
  int exclusive;          // Readout == ExclusiveBonus
};

}  // namespace linac::kernels::cuda::hopper
