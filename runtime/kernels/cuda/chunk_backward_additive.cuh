// The pieces of the additive rule's tensor-core backward (chunk_backward_additive.cu, whose
// header states the maths) that its fp32 fixed-class d_g scan (chunk_backward_fixed_dg.cu) shares:
// the chunk and tile constants, the kernels' parameters, a token's log-decay.
#pragma once

#include "../common/recurrence.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace linac::kernels::cuda::additive_bwd {

inline constexpr int kC = 64;                     // chunk length (tokens)
inline constexpr int kSlice = 64;                 // key slice / value block width of passes 2-3
inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kNT = 4;                     // 8-column n-tiles per warp tile (16 x 32)
inline constexpr int kDgThreads = 256;            // threads of the per-(sequence, head) dg scan
inline constexpr int kReduceThreads = 128;        // threads (a head each) of the fixed-class d_g sums
// Shared-memory leading dimensions (floats). An operand read as an A fragment element (row m,
// col k) = X[m * ld + k] is conflict-free with ld = 4 mod 32; read as a B fragment element
// (k, n) = X[k * ld + n] with ld = 8 mod 32. "Transposed" B reads X[n * ld + k] (ld = 4 mod 32).
inline constexpr int kLdA = kSlice + 4;           // 68
inline constexpr int kLdB = kSlice + 8;           // 72

/// Whether the products stage their sums (tile::warpTileProduct's Staged): for fp32 inputs only.
/// The tensor cores' truncating accumulation, fed the running sum, biases it toward zero by ~1e-6
/// relative over a chunk; staged, the fp32 scalar-class dg models at 1.7-1.9e-7 instead of
/// 1.0-1.6e-6 (NOTES.md, "fp32 additive backward's d_g"). 16-bit inputs (gate 5e-3) keep the
/// running sum and their speed.
template <typename T>
inline constexpr bool kStagedSums = std::is_same_v<T, float>;

template <typename T>
struct AddBwdParams {
  const T* q;              // [B, T, H, DK]
  const T* k;              // [B, T, H, DK]
  const T* v;              // [B, T, H, dv]
  const T* d_o;            // [B, T, H, dv]
  const float* g;          // None: null; Fixed [H]; Scalar [B, T, H]
  const float* h0;         // [N, H, DK, dv] or null
  const float* d_ht;       // [N, H, DK, dv] or null
  float* states;           // [slots, H, DK, dv] S_c (state before chunk c)
  float* dstates;          // [slots, H, DK, dv] dS_{c+1} (gradient after chunk c)
  T* dq;                   // [B, T, H, DK] or null
  T* dk;                   // [B, T, H, DK] or null
  T* dv;                   // [B, T, H, dv] or null
  float* dh0;              // [N, H, DK, dv] or null
  float* dgpart;           // [DK / kSlice, B * T * H] dG_t partial per key slice, or null
  const int64_t* cu_seqlens;  // [N + 1] device, or null
  int64_t seq_len;         // T
  int64_t chunks_per_seq;  // ceil(T / C) without cu_seqlens
  int num_seqs;            // N
  int heads;               // H
  int value_dim;           // dv
  float scale;
  int decay;               // DecayClass
};

/// Log-decay of token `tok` (global token index), head h; 0 for None.
template <typename P>
__device__ __forceinline__ float decayAt(const P& p, int64_t tok, int h) {
  if (p.decay == int(DecayClass::Scalar)) return p.g[tok * p.heads + h];
  if (p.decay == int(DecayClass::Fixed)) return p.g[h];
  return 0.f;
}

}  // namespace linac::kernels::cuda::additive_bwd
