// The pieces the passes of the delta rule's tensor-core backward share (chunk_backward_delta.cu,
// whose header states the maths, the numerics and the order of the passes; one file per pass:
// chunk_backward_delta_prep.cu, chunk_backward_delta_scan.cu, chunk_backward_delta_dqdk.cu,
// chunk_backward_delta_wy.cu): the chunk and tile constants, the kernels' parameters, the chunk's
// per-token scalars, asynchronous fp32 row copies, row sums, and the passes' launchers.
#pragma once

#include "../common/recurrence.h"
#include "chunk_slots.cuh"

#include "cuda_check.h"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace linac::kernels::cuda::delta_bwd {

inline constexpr int kC = 64;        // chunk length (tokens)
inline constexpr int kSlice = 64;    // key slice / value block width
inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kNT = 4;        // 8-column n-tiles per warp tile (16 x 32)
// Shared-memory leading dimensions (floats): an operand read as a direct A fragment (row m, col k)
// = X[m * ld + k] is conflict-free with ld = 4 mod 32, a direct B fragment (k, n) = X[k * ld + n]
// with ld = 8 mod 32; transposed reads swap the two.
inline constexpr int kLdA = kSlice + 4;  // 68
inline constexpr int kLdB = kSlice + 8;  // 72
static_assert(kC == kSlice && kC == 64, "the 8 warps tile a 64 x 64 output as 4 x 2 tiles of 16 x 32");

template <typename T>
struct DeltaBwdParams {
  const T* q;              // [B, T, H, DK]
  const T* k;              // [B, T, H, DK]
  const T* v;              // [B, T, H, dv]
  const T* d_o;            // [B, T, H, dv]
  const float* g;          // None: null; Scalar [B, T, H]
  const float* beta;       // [B, T, H]
  const float* h0;         // [N, H, DK, dv] or null
  const float* d_ht;       // [N, H, DK, dv] or null
  float* X;                // [slots, H, C, C]  (I + L)^-1 per chunk
  float* W;                // [rows, DK]  W (pass 1), then dW (pass 4)
  float* UD;               // [rows, dv]  U (pass 1), then D (pass 2)
  float* dD;               // [rows, dv]  scale A^T dO (pass 1), then dD (pass 3)
  float* states;           // [slots, H, DK, dv] S_c
  float* dstates;          // [slots, H, DK, dv] dS_{c+1}
  float* dkpart;           // [rows, DK]  dk from Kd and the intra-chunk term (pass 4)
  float* dbpart;           // [DK / kSlice, rows] db partials per key slice, or null
  float* kdpart;           // [DK / kSlice, rows] k_t . dk_Kd_t partials per key slice, or null
  float* zpart;            // [DK / kSlice, slots * H] chunk terms Z per key slice, or null
  T* dq;                   // [B, T, H, DK] or null
  T* dk;                   // [B, T, H, DK] or null
  T* dv;                   // [B, T, H, dv] or null
  float* dg;               // [B, T, H] or null
  float* dbeta;            // [B, T, H] or null
  float* dh0;              // [N, H, DK, dv] or null
  const int64_t* cu_seqlens;  // [N + 1] device, or null
  int64_t seq_len;         // T
  int64_t chunks_per_seq;  // ceil(T / C) without cu_seqlens
  int64_t rows;            // B * T * H
  int64_t slots;           // chunk slots
  int num_seqs;            // N
  int heads;               // H
  int value_dim;           // dv
  float scale;
  int decay;               // DecayClass (None or Scalar)
};

/// Loads the chunk's per-token scalars (warp 0 cumsums the log-decays, in double; threads t < C
/// read beta): sB[t] = b_t (double: with gates clamped at -20, b reaches -1280 in a chunk, where an
/// fp32 b_t - b_s would carry ~1e-4 absolute error into exp), sEb[t] = exp(b_t), sEc[t] =
/// exp(b_C - b_t), sBeta[t] (any may be null). The caller synchronizes before use.
template <bool Precise, typename P>
__device__ __forceinline__ void loadChunkScalars(const P& p, int64_t tok0, int lc, int h, double* sB,
                                                 float* sEb, float* sEc, float* sBeta) {
  const int tid = threadIdx.x, lane = tid & 31;
  if (sBeta && tid < kC) sBeta[tid] = tid < lc ? p.beta[(tok0 + tid) * p.heads + h] : 0.f;
  if ((tid >> 5) != 0) return;
  const bool sc = p.decay == int(DecayClass::Scalar);
  const float g0 = (sc && lane < lc) ? p.g[(tok0 + lane) * p.heads + h] : 0.f;
  const float g1 = (sc && lane + 32 < lc) ? p.g[(tok0 + lane + 32) * p.heads + h] : 0.f;
  double b0, b1, blast;
  chunkCumsum(g0, g1, b0, b1, blast);
  if (sB) { sB[lane] = b0; sB[lane + 32] = b1; }
  if (sEb) { sEb[lane] = fastExp<Precise>(float(b0)); sEb[lane + 32] = fastExp<Precise>(float(b1)); }
  if (sEc) {
    sEc[lane] = fastExp<Precise>(float(blast - b0));
    sEc[lane + 32] = fastExp<Precise>(float(blast - b1));
  }
}

/// exp(b_t - b_s) from the chunk's double cumsum (the difference is taken before rounding).
template <bool Precise>
__device__ __forceinline__ float decayRatio(const double* sB, int t, int s) {
  return fastExp<Precise>(float(sB[t] - sB[s]));
}

/// Whether the products stage their sums (tile::warpTileProduct's Staged): for fp32 inputs, whose
/// gate (1e-5) the tensor cores' truncating accumulation crossed (dbeta of verify's dk 256 case at
/// 1.05e-5); 16-bit inputs (gate 5e-3) keep the running sum.
template <typename T>
inline constexpr bool kStagedSums = std::is_same_v<T, float>;

/// Starts asynchronous copies of `rows x cols` fp32 elements (global row stride `stride`, 16-byte
/// aligned rows, cols % 4 == 0) into shared memory (leading dimension ld, a multiple of 4); rows >=
/// valid are zero-filled with plain stores. Complete with asyncWaitAll() then __syncthreads().
__device__ __forceinline__ void asyncRowsF32(float* dst, int ld, const float* src, int64_t stride,
                                             int rows, int valid, int cols) {
  const int vpr = cols / 4;
  for (int i = threadIdx.x; i < rows * vpr; i += kThreads) {
    const int r = i / vpr, c = (i - r * vpr) * 4;
    float* d = dst + r * ld + c;
    if (r < valid) {
      const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(d));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src + r * stride + c)
                   : "memory");
    } else {
      *reinterpret_cast<float4*>(d) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

/// Per-row sums over a warp's 16 x 32 accumulator tile of x * wt(r, c), added to the warp's own
/// half of a row: halves [2][kC], half n0 / 32 (the two warps of a 16-row tile hold the columns
/// 0-31 and 32-63; their rows meet only where the reader adds halves[0][r] + halves[1][r]). Each
/// (half, row) has one writer, so the sums are plain adds in a fixed order: deterministic.
template <typename F>
__device__ __forceinline__ void rowSumsInto(float (&acc)[kNT][4], int m0, int n0, float* halves,
                                            F&& wt) {
  float r0 = 0.f, r1 = 0.f;
  tile::forEachAcc(acc, m0, n0, [&](int r, int c, float& x) {
    const float y = x * wt(r, c);
    if (r - m0 < 8) r0 += y;
    else r1 += y;
  });
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    r0 += __shfl_xor_sync(0xffffffffu, r0, off);
    r1 += __shfl_xor_sync(0xffffffffu, r1, off);
  }
  const tile::Lane ln;
  if (ln.q == 0) {
    float* half = halves + (n0 / 32) * kC;
    half[m0 + ln.g] += r0;
    half[m0 + ln.g + 8] += r1;
  }
}

template <typename K>
void setSmem(K kernel, size_t bytes) {
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(bytes)));
}

// ---- the passes' launchers, in the order the host entry runs them ------------------------------
// Grids from p (slots, heads, num_seqs, value_dim); each checks its launch.
/// Pass 1 (chunk_backward_delta_prep.cu): X, W, U, dD_local per (chunk, head).
template <typename T, int DK, bool Precise>
void launchPrep(const DeltaBwdParams<T>& p, cudaStream_t stream);
/// Pass 2 (chunk_backward_delta_scan.cu): S_c and D per (value block, head, sequence).
template <typename T, int DK, bool Precise>
void launchFwdScan(const DeltaBwdParams<T>& p, cudaStream_t stream);
/// Pass 3 (chunk_backward_delta_scan.cu): dD, dS_{c+1} and d_h0 per (value block, head, sequence).
template <typename T, int DK, bool Precise>
void launchBwdScan(const DeltaBwdParams<T>& p, cudaStream_t stream);
/// Pass 4 (chunk_backward_delta_dqdk.cu): dq, dk partial, dW, db / kd / Z partials per (chunk,
/// head, key slice).
template <typename T, int DK, bool Precise>
void launchDqdk(const DeltaBwdParams<T>& p, cudaStream_t stream);
/// Pass 5 (chunk_backward_delta_wy.cu): dv, dk, dbeta, dg per (chunk, head).
template <typename T, int DK, bool Precise>
void launchWyBwd(const DeltaBwdParams<T>& p, cudaStream_t stream);

}  // namespace linac::kernels::cuda::delta_bwd

/// X(T, DK, Precise) for every configuration the host entry dispatches (runDeltaBwd: each element
/// type and dk, always 3xTF32); every pass file instantiates its launchers for these.
#define LINAC_DELTA_BWD_CONFIGS(X)                                                              \
  X(float, 64, true) X(float, 128, true) X(float, 256, true)                                    \
  X(__nv_bfloat16, 64, true) X(__nv_bfloat16, 128, true) X(__nv_bfloat16, 256, true)            \
  X(__half, 64, true) X(__half, 128, true) X(__half, 256, true)
