// Arguments of the Hopper backward of the diagonal decay: its state passes (diag_state_scan.cuh)
// and its gradient stage (diag_key_grad.cuh, diag_value_grad.cuh). Tensors are contiguous
// [B, T, H, D] as in the forward (forward_params.h); the two state workspaces, in the input dtype
// with one row per chunk slot (chunk_slots.cuh), are written by the state passes and read by the
// gradient stage (which takes them as wgmma operands in that dtype anyway).
#pragma once

#include <cstdint>

namespace linac::kernels::cuda::hopper {

constexpr int kDiagKeyBlock = 64;  // key channels of a CTA of the key stage (diag_key_grad.cuh)

struct DiagGradParams {
  const void* q;          // [B, T, H, dk]
  const void* k;          // [B, T, H, dk]
  const void* v;          // [B, T, H, dv]
  const void* d_o;        // [B, T, H, dv]
  const float* g;         // [B, T, H, dk] log-decay
  const float* u;         // [H, dk] (exclusive readout) or null
  const float* h0;        // [N, H, dk, dv] initial state or null
  const float* d_ht;      // [N, H, dk, dv] final state's gradient or null
  float* dh0;             // [N, H, dk, dv] or null
  void* states;           // [slots, H, dk, dv] S_c, the state before chunk c (input dtype)
  void* dstates;          // [slots, H, dk, dv] dS_{c+1}, the gradient after chunk c (input dtype)
  void* dq;               // [B, T, H, dk] or null
  void* dk;               // [B, T, H, dk] or null
  void* dv;               // [B, T, H, dv] or null
  float* dg;              // [B, T, H, dk] or null
  float* du_part;         // [slots, H, dk] d_u partials (exclusive, d_u wanted) or null
  // The stages by key block (diag_key_grad.cuh, diag_value_grad.cuh): each key block's share of
  // A^T, fp32, a plane of at_plane elements ([slots, H, C, C]) per block, and K e^{B - b} (input
  // dtype), both written by the key stage for the value stage's dv; null where dv is not wanted.
  float* at_part;
  int64_t at_plane;
  void* kexp;             // [B, T, H, dk]
  // The state passes in segments (diag_state_scan.cuh; a padded batch): each sequence's chunks in
  // `segments` runs of seg_chunks (the last shorter), one CTA a run; segments <= 1: whole
  // sequences. With R = N * segments runs:
  int segments;
  int64_t seg_chunks;
  const float* seg_starts;  // [2, R, H, dk, dv] each run's start state (forward, reverse), fp32
  float* seg_ends;          // [2, R, H, dk, dv] each run's end state from zero (the ends pass)
  float* seg_decay;         // [R, H, dk] each run's total log-decay per key channel (the ends pass)
  const int64_t* cu_seqlens;  // [N + 1] (device) or null
  int64_t seq_len;        // T
  int64_t chunks_per_seq; // ceil(T / C) (padded batches)
  int num_seqs;           // N
  int heads;              // H
  int key_dim;            // dk
  int value_dim;          // dv
  float scale;
  int exclusive;          // Readout == ExclusiveBonus
  int low_halves;         // Ks and Qs also as low 16-bit halves (diag_key_grad.cuh; backward.cu says when)
};

}  // namespace linac::kernels::cuda::hopper
