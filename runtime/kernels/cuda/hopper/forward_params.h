// Arguments of the Hopper forward stages (delta_prepare.cuh, diagonal_prepare.cuh,
// scores_prepare.cuh, state_output.cuh). Element pointers are
// untyped here; each kernel reads them as its dtype. Tensors are contiguous [B, T, H, D] (tokens
// packed as [B * T] rows of H heads); with cu_seqlens, B = 1 and sequence n spans tokens
// [cu_seqlens[n], cu_seqlens[n + 1]).
#pragma once

#include <cstdint>

namespace linac::kernels::cuda::hopper {

constexpr int kValueBlock = 64;        // value columns (BV) per CTA of the state stage
constexpr int kNarrowValueBlock = 32;  // ... when the grid is small enough for two CTAs per SM
constexpr int kThinValueBlock = 16;    // ... when even that leaves SMs idle (ForwardParams::thin_state)

struct ForwardParams {
  const void* q;         // [B, T, H, dk]
  const void* k;         // [B, T, H, dk]
  const void* v;         // [B, T, H, dv]
  const float* g;        // None: null; Fixed [H]; Scalar [B, T, H]
  const float* beta;     // [B, T, H] (delta)
  const void* w;         // [B, T, H, dk] (delta) W = T (K . exp(b)), written by the preparation
  const void* u;         // [B, T, H, dv] (delta) U = T V, written by the preparation
  const float* bonus;    // [H, dk] (exclusive readout) RWKV-6's u
  const void* qd;        // [B, T, H, dk] (diagonal) scale q . exp(bq), diagonal_prepare.cuh
  const void* kd;        // [B, T, H, dk] (diagonal) k . exp(b_last - b)
  const void* pd;        // [slots, H, C, C] (diagonal, delta, prepared scores) the chunk's decayed,
                         // masked, scaled Q K^T, written by the preparation
  const float* decay;    // [slots, H, dk] (diagonal) exp(b_last) per key channel
  const float* h0;       // [N, H, dk, dv] or null
  void* o;               // [B, T, H, dv]
  float* ht;             // [N, H, dk, dv] or null
  const int64_t* cu_seqlens;  // [N + 1] (device) or null
  int64_t seq_len;       // T
  int64_t chunks_per_seq;  // ceil(T / C) (padded batches; chunk slots, chunk_slots.cuh)
  int64_t tokens;        // B * T
  int64_t slots;         // chunk slots of the batch (chunk_slots.cuh)
  int num_seqs;          // N
  int heads;             // H
  int value_dim;         // dv
  float scale;
  bool block_inverse;    // (delta) X = (I + A)^-1 by two 32-row halves on every warp
                         // (unit_lower_inverse.cuh), the default; false (LINAC_HOPPER_BLOCK_INVERSE=0):
                         // one column per thread
  bool overlap;          // (delta) the state stage waits for W S and K^T X before Q S and P X,
                         // which then run under X's forming and the state's publishing
                         // (state_output.cuh); timed by forward.cu (autotune.h)
  bool late_loads;       // (delta, dk <= 128) the state stage keeps one stage of q / w tiles
                         // (forward.cu chooses; dk 256 always does)
  bool prepared_scores;  // (additive, decay none / fixed / scalar) P from scores_prepare.cuh, loaded
                         // by the state stage instead of formed there (forward.cu chooses)
  bool thin_state;       // (dk <= 128) the state stage in value blocks of kThinValueBlock where
                         // blocks of kNarrowValueBlock make fewer CTAs than SMs (forward.cu says when)
};

/// Writable views of the preparation's outputs.
struct PrepareOutputs {
  void* w;  // [B, T, H, dk]
  void* u;  // [B, T, H, dv]
  void* p;  // [slots, H, C, C]
};

}  // namespace linac::kernels::cuda::hopper
