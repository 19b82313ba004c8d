// The pieces the passes of the diagonal decay's tensor-core backward share
// (chunk_backward_diagonal.cu, whose header states the maths, the numerics and the order of the
// passes; one file per pass: chunk_backward_diagonal_scan.cu, chunk_backward_diagonal_dqdk.cu,
// chunk_backward_diagonal_dv.cu): the chunk and tile constants, the kernels' parameters, the
// in-chunk per-channel cumsum, and the passes' launchers.
#pragma once

#include "../common/recurrence.h"
#include "chunk_slots.cuh"

#include "cuda_check.h"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace linac::kernels::cuda::diag_bwd {

inline constexpr int kC = 64;                      // chunk length (tokens)
inline constexpr int kSlice = 64;                  // key slice / value block width
inline constexpr int kSub = 16;                    // sub-block length for decay reference points
inline constexpr int kNSub = kC / kSub;            // sub-blocks per chunk
inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kNT = 4;                      // 8-column n-tiles per warp tile (16 x 32)
inline constexpr int kParts = kThreads / kSlice;   // threads per channel in the in-chunk cumsum
inline constexpr int kPartLen = kC / kParts;       // tokens per cumsum thread
inline constexpr int kReduceThreads = 128;
// Shared-memory leading dimensions (floats): an operand read as an A fragment element (m, k) =
// X[m * ld + k] or a transposed B element (k, n) = X[n * ld + k] is conflict-free with
// ld = 4 mod 32; a direct B element X[k * ld + n] (or A read as X[k * ld + m]) with ld = 8 mod 32.
inline constexpr int kLdA = kSlice + 4;            // 68
inline constexpr int kLdB = kSlice + 8;            // 72
static_assert(kC == kSlice, "D [C x C] aliases a state slice [kSlice x kSlice]");
static_assert(kParts * kPartLen == kC && kThreads % kSlice == 0, "cumsum thread layout");
static_assert(kWarps == (kC / 16) * (kSlice / (8 * kNT)), "one 16 x 32 tile per warp");
static_assert(kSub == 16, "sub-blocks are one mma row tile");

template <typename T>
struct DiagBwdParams {
  const T* q;              // [B, T, H, DK]
  const T* k;              // [B, T, H, DK]
  const T* v;              // [B, T, H, dv]
  const T* d_o;            // [B, T, H, dv]
  const float* g;          // [B, T, H, DK] log-decay
  const float* u;          // [H, DK] (exclusive) or null
  const float* h0;         // [N, H, DK, dv] or null
  const float* d_ht;       // [N, H, DK, dv] or null
  float* states;           // [slots, H, DK, dv] S_c (state before chunk c)
  float* dstates;          // [slots, H, DK, dv] dS_{c+1} (gradient after chunk c)
  T* dq;                   // [B, T, H, DK] or null
  T* dk;                   // [B, T, H, DK] or null
  T* dv;                   // [B, T, H, dv] or null
  float* dg;               // [B, T, H, DK] or null
  float* dh0;              // [N, H, DK, dv] or null
  float* du_part;          // [slots, H, DK] d_u partials (exclusive with d_u), or null
  const int64_t* cu_seqlens;  // [N + 1] device, or null
  int64_t seq_len;         // T
  int64_t chunks_per_seq;  // ceil(T / C) without cu_seqlens (>= 1)
  int num_seqs;            // N
  int heads;               // H
  int value_dim;           // dv
  float scale;
  int exclusive;           // Readout == ExclusiveBonus
};

/// Cumulative sum over the chunk's tokens of a [kC x kSlice] fp32 tile of log-decays in shared
/// memory (padded tokens hold 0), in double. Thread (column c = tid % kSlice, part = tid /
/// kSlice) owns tokens part * kPartLen .. + kPartLen - 1 of column c and calls
/// emit(t, c, b_t, b_{t-1}, B) for each (b_{-1} = 0, B = b_{C-1}, bit-identical to b at the last
/// token); emit may overwrite sG[t][c] (it is read before). sTot: [kParts * kSlice] doubles of
/// scratch. Callers __syncthreads() before (tile loaded) and after.
template <typename F>
__device__ __forceinline__ void channelCumsum(float* sG, int ld, double* sTot, F&& emit) {
  const int c = threadIdx.x % kSlice, part = threadIdx.x / kSlice, t0 = part * kPartLen;
  double acc = 0.0;
#pragma unroll
  for (int i = 0; i < kPartLen; ++i) acc += sG[(t0 + i) * ld + c];
  sTot[part * kSlice + c] = acc;
  __syncthreads();
  double prefix = 0.0, total = 0.0;
#pragma unroll
  for (int pp = 0; pp < kParts; ++pp) {
    const double x = sTot[pp * kSlice + c];
    if (pp < part) prefix = total + x;  // same summation order as total: prefix == b_{t0 - 1}
    total += x;
  }
  if (part == 0) prefix = 0.0;
  double loc = 0.0, prev = prefix;  // loc repeats acc's sums, so b at the last token == total
#pragma unroll
  for (int i = 0; i < kPartLen; ++i) {
    loc += sG[(t0 + i) * ld + c];
    const double b = prefix + loc;
    emit(t0 + i, c, b, prev, total);
    prev = b;
  }
}

template <typename K>
void setSmem(K kernel, size_t bytes) {
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(bytes)));
}

// ---- the passes' launchers, in the order the host entry runs them ------------------------------
// Grids from p (heads, num_seqs, value_dim) and the chunk slots; each checks its launch.
/// Pass 1 (chunk_backward_diagonal_scan.cu): S_c, dS_{c+1} and d_h0 per (value block, head x key
/// slice, sequence x direction).
template <typename T, int DK, bool Precise>
void launchDiagStateScan(const DiagBwdParams<T>& p, cudaStream_t stream);
/// Pass 2 (chunk_backward_diagonal_dqdk.cu): dq, dk, d_g, d_u partials per (chunk, head, key
/// slice).
template <typename T, int DK, bool Precise>
void launchDiagDqdk(const DiagBwdParams<T>& p, int64_t slots, cudaStream_t stream);
/// Pass 3 (chunk_backward_diagonal_dv.cu): dv per (chunk, head, value block).
template <typename T, int DK, bool Precise>
void launchDiagDv(const DiagBwdParams<T>& p, int64_t slots, cudaStream_t stream);

}  // namespace linac::kernels::cuda::diag_bwd

/// X(T, DK, Precise) for every configuration the host entry dispatches (launchDiagBwd: each element
/// type and dk, 3xTF32 for fp32 inputs only); every pass file instantiates its launchers for these.
#define LINAC_DIAG_BWD_CONFIGS(X)                                                               \
  X(float, 64, true) X(float, 128, true) X(float, 256, true)                                    \
  X(__nv_bfloat16, 64, false) X(__nv_bfloat16, 128, false) X(__nv_bfloat16, 256, false)         \
  X(__half, 64, false) X(__half, 128, false) X(__half, 256, false)
