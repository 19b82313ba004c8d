// Arguments of the Hopper backward stages for the additive rule (state_scan.cuh, chunk_grad.cuh,
// and at dk 256 chunk_grad_keys.cuh, chunk_grad_values.cuh); the forward's split form
// (forward_split.cuh) runs the forward state pass with them too.
// Tensors are contiguous [B, T, H, D] as in the forward (forward_params.h); chunk slots map chunks
// of every sequence to workspace rows (chunk_slots.cuh).
#pragma once

#include <cstdint>

namespace linac::kernels::cuda::hopper {

// The additive rule's gradient at dk 256 (chunk_grad_keys.cuh, chunk_grad_values.cuh):
constexpr int kGradKeyBlock = 128;   // key channels per CTA of the key stage
constexpr int kGradValueBlock = 64;  // value columns per pipeline stage (key stage) and per CTA (value stage)

struct BackwardParams {
  const void* q;          // [B, T, H, dk]
  const void* k;          // [B, T, H, dk]
  const void* v;          // [B, T, H, dv]
  const void* d_o;        // [B, T, H, dv]
  const float* g;         // None: null; Fixed [H]; Scalar [B, T, H]
  const float* h0;        // [N, H, dk, dv] or null
  const float* d_ht;      // [N, H, dk, dv] or null
  void* states;           // [slots, H, dk, dv] S_c, the state before chunk c (input dtype)
  void* dstates;          // [slots, H, dk, dv] dS_{c+1}, the gradient after chunk c (input dtype)
  void* dq;               // [B, T, H, dk] or null
  void* dk;               // [B, T, H, dk] or null
  void* dv;               // [B, T, H, dv] or null
  float* dg;              // Scalar [B, T, H] or null
  float* dg_part;         // [dk / 128, B * T, H]: the key blocks' shares of dg (chunk_grad_keys.cuh), or null
  int64_t dg_plane;       // elements per dg_part plane (B * T * H)
  float* dh0;             // [N, H, dk, dv] or null
  float* ht;              // [N, H, dk, dv] or null: the forward pass's final state (written only
                          // by the forward's split form, forward_split.cuh)
  const int64_t* cu_seqlens;  // [N + 1] (device) or null
  int64_t seq_len;        // T
  int64_t chunks_per_seq; // ceil(T / C) (padded batches)
  int num_seqs;           // N
  int heads;              // H
  int key_dim;            // dk
  int value_dim;          // dv
  float scale;
  bool joint_state_passes;  // both state passes in one launch (state_scan.cuh; backward.cu says when)
};

}  // namespace linac::kernels::cuda::hopper
