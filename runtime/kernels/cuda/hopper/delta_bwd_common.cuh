// Pieces the delta rule's Hopper backward stages share (delta_bwd_*.cuh):
//  - the chunk's cumulative log-decay b in double (chunk_slots.cuh's chunkCumsum: with strong gates
//    b reaches -1000 within a chunk, where an fp32 b_t - b_s would carry ~1e-4 into exp), and the
//    factors exp(b_t - b_s) (s <= t), exp(b_t), exp(b_last - b_t), every exponent <= 0;
//  - two-term operands: an fp32 value x held as hi + lo in the input dtype (hi = T(x),
//    lo = T(x - hi)), so a product with it costs two wgmma but carries ~2^-16 relative error
//    instead of bf16's 2^-9. The host transcription measured which operands need it (the error of
//    dg and dbeta grows with the rounding of U, D, dD and dS_{c+1}; NOTES.md).
#pragma once

#include "../chunk_slots.cuh"
#include "chunk_decay.cuh"
#include "tiles.cuh"
#include "tma.cuh"

namespace linac::kernels::cuda::hopper {

/// The state passes' tensor maps (tma.cuh): q, k, w as (DK, 1, C, 1) boxes of [tokens, H, dk],
/// d_o as (BV, 1, C, 1) boxes of [tokens, H, dv], each (width, heads, tokens, sequences) with a
/// packed batch one sequence of all its tokens.
struct DeltaStateMaps {
  CUtensorMap q, k, w, d_o;
};

/// Per-chunk scalars in shared memory: the log-decays as staged, their cumsum, beta.
struct DeltaChunkScalars {
  double b[kChunk];    // b_t, inclusive cumsum of g inside the chunk (0 without decay)
  float g[kChunk];     // staged log-decays (ScalarDecay)
  float beta[kChunk];  // beta_t, 0 past the sequence end
};

/// Warp 0: b[t] = g_0 + ... + g_t in double from the staged g (tokens past the sequence end were
/// staged as 0); 0 without decay.
template <class Decay>
__device__ void chunkCumsumDouble(double* b, const float* g) {
  const int lane = threadIdx.x & 31;
  if constexpr (Decay::kClass == DecayClass::Scalar) {
    double b0, b1, blast;
    chunkCumsum(g[lane], g[lane + 32], b0, b1, blast);
    b[lane] = b0;
    b[lane + 32] = b1;
  } else {
    b[lane] = 0.0;
    b[lane + 32] = 0.0;
  }
}

/// Starts the chunk's log-decay copy (cp.async, ScalarDecay) and writes beta; threads 0..C-1 take
/// part. Then: commit, wait, barrier, chunkCumsumDouble by warp 0, barrier.
template <class Decay>
__device__ void stageDeltaScalars(DeltaChunkScalars& cs, const float* g, const float* beta,
                                  int64_t tok0, int rows, int h, int H) {
  stageLogDecay<Decay>(cs.g, g, tok0, rows, h, H);
  const int t = threadIdx.x;
  if (t < kChunk) cs.beta[t] = t < rows ? beta[(tok0 + t) * H + h] : 0.f;
}

/// exp(b_t - b_s) for s <= t (the difference taken in double), 0 above the diagonal.
template <class Decay>
__device__ float decayRatio(const double* b, int t, int s) {
  if (s > t) return 0.f;
  if constexpr (!Decay::kActive) return 1.f;
  return __expf(float(b[t] - b[s]));
}
/// exp(b_t).
template <class Decay>
__device__ float decayFrom(const double* b, int t) {
  if constexpr (!Decay::kActive) return 1.f;
  return __expf(float(b[t]));
}
/// exp(b_last - b_t).
template <class Decay>
__device__ float decayTo(const double* b, int t) {
  if constexpr (!Decay::kActive) return 1.f;
  return __expf(float(b[kChunk - 1] - b[t]));
}

/// x0, x1 as two pairs of T: hi = T(x), lo = T(x - hi), each packed low / high into 32 bits.
template <class T>
__device__ void splitPack2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = pack2<T>(x0, x1);
  const float2 h = unpack2<T>(hi);
  lo = pack2<T>(x0 - h.x, x1 - h.y);
}

/// Starts cp.async copies of rows [0, R) of a global fp32 [R, Cc] block (row r at
/// src + r * rowStride, 16-byte aligned) into a row-major fp32 buffer in shared memory whose rows
/// are kLd floats apart; rows at or past `rows` are zero-filled. No registers hold the values, so
/// every copy is in flight at once next to live accumulators. All kThreads threads call; the caller
/// commits, waits (copyWait) and syncs before reading.
template <int R, int Cc, int kLd, int kThreads>
__device__ void stageRowsAsync(float* dst, const float* src, int64_t rowStride, int rows, int tid) {
  constexpr int kPerRow = Cc / 4;
  constexpr int kTotal = R * kPerRow;
  static_assert(Cc % 4 == 0 && kLd % 4 == 0, "rows are copied as 16-byte vectors");
  CUTE_UNROLL
  for (int k = 0; k < (kTotal + kThreads - 1) / kThreads; ++k) {
    const int i = tid + k * kThreads;
    if (kTotal % kThreads != 0 && i >= kTotal) break;
    const int r = i / kPerRow, c = (i % kPerRow) * 4;
    const bool valid = r < rows;
    const float* g = src + (valid ? int64_t(r) * rowStride + c : 0);
    copy16(static_cast<uint32_t>(__cvta_generic_to_shared(dst + r * kLd + c)), g, valid);
  }
}

/// Four fp32 values of row r, columns c..c + 3, into RowTiles hi and lo as hi + lo pairs
/// (splitPack2); a fence and a barrier must follow before the tensor cores read them.
template <class T, class Tile>
__device__ void storeSplit4(const Tile& hi, const Tile& lo, int r, int c, const float4& x) {
  uint32_t h0, l0, h1, l1;
  splitPack2<T>(x.x, x.y, h0, l0);
  splitPack2<T>(x.z, x.w, h1, l1);
  sts32(hi.at(r, c), h0);
  sts32(hi.at(r, c + 2), h1);
  sts32(lo.at(r, c), l0);
  sts32(lo.at(r, c + 2), l1);
}

/// Writes a staged fp32 [R, Cc] buffer (rows kLd floats apart, stageRowsAsync) into RowTiles
/// [r, c] as hi (+ lo when kLo). All kThreads threads call; a fence and a barrier must follow
/// before the tensor cores read the tiles.
template <int R, int Cc, int kLd, int kThreads, bool kLo, class Tile>
__device__ void splitStagedRows(const Tile& hi, const Tile& lo, const float* staged, int tid) {
  using T = std::remove_cv_t<std::remove_pointer_t<decltype(hi.ptr)>>;
  constexpr int kPerRow = Cc / 4;
  constexpr int kTotal = R * kPerRow;
  CUTE_UNROLL
  for (int k = 0; k < (kTotal + kThreads - 1) / kThreads; ++k) {
    const int i = tid + k * kThreads;
    if (kTotal % kThreads != 0 && i >= kTotal) break;
    const int r = i / kPerRow, c = (i % kPerRow) * 4;
    const float4 x = *reinterpret_cast<const float4*>(staged + r * kLd + c);
    if constexpr (kLo) {
      storeSplit4<T>(hi, lo, r, c, x);
    } else {
      sts32(hi.at(r, c), pack2<T>(x.x, x.y));
      sts32(hi.at(r, c + 2), pack2<T>(x.z, x.w));
    }
  }
}

/// A global fp32 [R, Cc] block (row r at src + r * rowStride, 16-byte aligned) in the registers
/// of kThreads threads, as 16-byte vectors: vector k of thread tid holds row i / (Cc / 4),
/// columns 4 (i % (Cc / 4)) .. + 3 of i = tid + k kThreads; rows at or past `rows` read as 0.
/// Loaded with every vector in flight at once (no shared-memory staging), then split into tiles.
template <int R, int Cc, int kThreads>
struct Fp32Rows {
  static constexpr int kPerRow = Cc / 4;
  static constexpr int kVecs = R * kPerRow / kThreads;
  static_assert(Cc % 4 == 0 && (R * kPerRow) % kThreads == 0, "whole vectors on every thread");
  float4 v[kVecs];

  __device__ void load(const float* src, int64_t rowStride, int rows, int tid) {
    CUTE_UNROLL
    for (int k = 0; k < kVecs; ++k) {
      const int i = tid + k * kThreads, r = i / kPerRow, c = (i % kPerRow) * 4;
      v[k] = r < rows ? __ldg(reinterpret_cast<const float4*>(src + int64_t(r) * rowStride + c))
                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  /// f(row, col, vector) for each vector of thread tid.
  template <class F>
  __device__ void forEach(int tid, F&& f) const {
    CUTE_UNROLL
    for (int k = 0; k < kVecs; ++k) {
      const int i = tid + k * kThreads;
      f(i / kPerRow, (i % kPerRow) * 4, v[k]);
    }
  }
  /// Writes the block into RowTiles [r, c] as hi and lo (splitPack2); a fence and a barrier must
  /// follow before the tensor cores read them.
  template <class T, class Tile>
  __device__ void splitInto(const Tile& hi, const Tile& lo, int tid) const {
    forEach(tid, [&](int r, int c, const float4& x) { storeSplit4<T>(hi, lo, r, c, x); });
  }
};

/// threadIdx.x read where it is used: values computed from it inside a loop are not hoisted out
/// of the loop into registers that stay live beside the accumulators.
__device__ inline int threadIndexHere() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return t;
}

}  // namespace linac::kernels::cuda::hopper
