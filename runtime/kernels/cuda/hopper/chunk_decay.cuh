// Log-decays of one chunk for the Hopper stages: the decay class as a traits type.
//
// A chunk holds C = 64 tokens starting at token tok0 (an index into the packed [B * T] tokens);
// b_t = g_0 + ... + g_t is its inclusive cumulative log-decay (fp32, every b_t <= 0), with g = 0
// for tokens past the sequence end. The stages need exp(b_t - b_s) for s <= t, exp(b_t) and
// exp(b_last - b_t), all with exponents <= 0.
//   NoDecay      g = 0: no tensor, no cumsum, every factor 1 (the products skip the scaling)
//   FixedDecay   g [H]: b_t = (t + 1) g_h
//   ScalarDecay  g [B, T, H]: staged per chunk into shared memory by cp.async, then summed by one
//                warp (two tokens per lane).
//   PrecomputedDiagonal  g [B, T, H, dk], applied by diagonal_prepare.cuh before the state stage.
// kScoresPrepared: whether a preparation stage wrote the chunk's P for the additive rule's state
// stage (the delta rule's preparation always does).
#pragma once

#include "../../common/recurrence.h"

#include <cstdint>

namespace linac::kernels::cuda::hopper {

constexpr int kChunk = 64;

struct NoDecay {
  static constexpr bool kActive = false;
  static constexpr DecayClass kClass = DecayClass::None;
  static constexpr bool kScoresPrepared = false;  // P formed in the state stage (additive)
};

struct FixedDecay {
  static constexpr bool kActive = true;
  static constexpr DecayClass kClass = DecayClass::Fixed;
  static constexpr bool kScoresPrepared = false;  // P formed in the state stage (additive)
};

struct ScalarDecay {
  static constexpr bool kActive = true;
  static constexpr DecayClass kClass = DecayClass::Scalar;
  static constexpr bool kScoresPrepared = false;  // P formed in the state stage (additive)
};

/// A diagonal (per key channel) decay whose factors diagonal_prepare.cuh has already applied to the
/// queries, the keys and the chunk's attention matrix: the state stage only scales its state rows.
struct PrecomputedDiagonal {
  static constexpr bool kActive = false;
  static constexpr DecayClass kClass = DecayClass::Diagonal;
  static constexpr bool kScoresPrepared = true;
};

/// Decay none / fixed / scalar with the chunk's attention matrix P formed by a chunk-parallel
/// preparation (scores_prepare.cuh) that the additive rule's state stage loads, instead of forming
/// Q K^T on its serial chain of chunks.
template <class Decay>
struct WithPreparedScores : Decay {
  static_assert(Decay::kClass != DecayClass::Diagonal, "the diagonal decay prepares its own scores");
  static constexpr bool kScoresPrepared = true;
};

/// e^x as __expf computes it (x log2 e, then MUFU.EX2) but with denormal results flushed to zero:
/// __expf's ex2.approx.f32 rescales around every MUFU to keep them (a compare and two predicated
/// multiplies), which a stage taking an exponential per (token, channel) would pay ~10^4 to 10^5
/// times a CTA. The difference is below 2^-126 in absolute value.
__device__ __forceinline__ float expFtz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}

/// Starts copying the chunk's per-token log-decays g[tok0 .. tok0 + rows) of head h into sG[0, C)
/// (ScalarDecay only; 4-byte cp.async, tokens past `rows` zero-filled). Threads 0..C-1 take part.
template <class Decay>
__device__ void stageLogDecay(float* sG, const float* g, int64_t tok0, int rows, int h, int H) {
  if constexpr (Decay::kClass == DecayClass::Scalar) {
    const int t = threadIdx.x;
    if (t < kChunk) {
      const bool valid = t < rows;
      const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(sG + t));
      const float* src = g + (valid ? (tok0 + t) * H + h : 0);
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                   "r"(valid ? 4 : 0)
                   : "memory");
    }
  }
}

/// Writes sB[t] = b_t for t in [0, C). Called by warp 0 only, after the chunk's sG has landed.
/// Tokens past `rows` keep b constant (g = 0).
template <class Decay>
__device__ void chunkLogDecay(float* sB, const float* sG, const float* g, int rows, int h) {
  const int lane = threadIdx.x & 31;
  const int t0 = 2 * lane, t1 = t0 + 1;
  float g0 = 0.f, g1 = 0.f;
  if constexpr (Decay::kClass == DecayClass::Fixed) {
    const float gh = g[h];
    g0 = t0 < rows ? gh : 0.f;
    g1 = t1 < rows ? gh : 0.f;
  } else if constexpr (Decay::kClass == DecayClass::Scalar) {
    g0 = sG[t0];
    g1 = sG[t1];
  }
  const float pair = g0 + g1;
  float incl = pair;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const float up = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += up;
  }
  sB[t0] = incl - pair + g0;
  sB[t1] = incl;
}

/// The chunk's attention scores at (t, s) and (t, s + 1) from Q K^T's accumulator pair (qk0, qk1):
///   P[t][s] = scale (q_t . k_s) exp(b_t - b_s) for s <= t, else 0
/// with b the chunk's log-decays (sB, chunkLogDecay; unread without a decay). exp(b_t - b_s) is
/// taken only where s <= t: above the diagonal it can overflow (strong gates), and 0 * inf is NaN.
template <class Decay>
__device__ __forceinline__ float2 maskedScores(float qk0, float qk1, int t, int s, const float* sB,
                                               float scale) {
  float f0 = scale, f1 = scale;
  if constexpr (Decay::kActive) {
    const float bt = sB[t];
    f0 *= __expf(fminf(bt - sB[s], 0.f));
    f1 *= __expf(fminf(bt - sB[s + 1], 0.f));
  }
  return make_float2(s <= t ? qk0 * f0 : 0.f, s + 1 <= t ? qk1 * f1 : 0.f);
}

}  // namespace linac::kernels::cuda::hopper
