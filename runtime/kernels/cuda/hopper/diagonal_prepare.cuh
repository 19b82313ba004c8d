// Hopper forward, preparation stage of a diagonal (per key channel) decay with the additive rule
// (GLA, HGRN-2, RWKV-6), key dims 64, 128 and 256: chunk-parallel, one CTA of eight warps per
// (chunk slot, head). Everything
// the per-channel decay changes is computed here once per chunk and head, so that the state stage
// (state_output.cuh, kDiagonal) runs the plain products for every block of value columns.
//
// With b[t][c] the in-chunk cumulative log-decay of channel c (inclusive, fp32, every b <= 0) and
// bq_t = b_t (inclusive readout) or b_{t-1} (exclusive, b_{-1} = 0):
//   qd[t]   = scale q_t . exp(bq_t)                    the query of the inter-chunk term
//   kd[s]   = k_s . exp(b_last - b_s)                  the key of the state update
//   decay   = exp(b_last)                              per channel, scales the state's rows
//   P[t][s] = scale sum_c q_tc k_sc exp(bq_tc - b_sc)  for s <= t (s < t exclusive), 0 above,
//             plus, exclusive, P[t][t] = scale sum_c q_tc u_c k_tc (RWKV-6's bonus)
// P in 16-token blocks: a block below the diagonal (rows of block i > columns of block j) factors
// through the reference r = b at the last row of block i - 1, exp(bq_t - r) exp(r - b_s), both
// exponents <= 0, so it is a product of scaled rows (one exponent per element, not per pair). A
// diagonal block walks decay chains (diagonalBlocksByChains): no exponential per pair either.
// Strong gates underflow to 0, never overflow.
// Outputs in the input dtype except decay (fp32): qd, kd [B, T, H, dk]; P [slots, H, C, C];
// decay [slots, H, dk].
#pragma once

#include "../chunk_slots.cuh"
#include "../tile.cuh"
#include "chunk_decay.cuh"
#include "forward_params.h"
#include "tiles.cuh"

namespace linac::kernels::cuda::hopper {

struct DiagonalOutputs {
  void* qd;      // [B, T, H, dk]
  void* kd;      // [B, T, H, dk]
  void* p;       // [slots, H, C, C]
  float* decay;  // [slots, H, dk]
};

// Two CTAs of eight warps per SM at dk <= 128 (one at dk 256, whose tiles take ~200 KB): every
// loop below is a chain of shared-memory loads and exponentials, and four warps per scheduler hide
// each other's latency where one could not.
constexpr int kDiagonalPrepareThreads = 256;

template <class T, int DK>
struct DiagonalPrepareSmem {
  static constexpr int C = kChunk;
  static constexpr int kBlock = 16;        // token block of the factorisation
  static constexpr int kLdH = DK + 8;      // 16-bit rows, 16-byte aligned
  static constexpr int kLdB = DK + 4;      // fp32 rows of b, 16-byte aligned (cp.async)
  static constexpr int kLdX = DK + 1;      // fp32 rows of x, read by column
  T q[C * kLdH];
  T k[C * kLdH];
  float b[C * kLdB];                       // g, then its in-chunk cumsum
  float x[C * kLdX];                       // a = exp(g) [C, DK]; then scaled rows of a block row
  float pd[C / kBlock][kBlock][kBlock];    // the diagonal blocks' sums, unscaled
  float u[DK];
  static_assert(C * DK <= C * kLdX, "a = exp(g) fits in x");
};

/// One step of reduceScatter16: lanes whose `kBit` is clear keep v[0, kWidth), the others
/// v[kWidth, 2 kWidth) (moved down to v[0, kWidth)); each adds its partner's copy of what it keeps.
template <int kWidth, int kBit>
__device__ inline void reduceScatterStep(float (&v)[16], int lane) {
  const bool upper = (lane & kBit) != 0;
  CUTE_UNROLL
  for (int i = 0; i < kWidth; ++i) {
    const float send = upper ? v[i] : v[i + kWidth];
    const float keep = upper ? v[i + kWidth] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kBit);
  }
}

/// The sum over a warp's 32 lanes of v[lane >> 1], returned on both lanes of each pair: a
/// reduce-scatter of 16 values in 16 shuffles, where 16 separate warp sums would take 80.
__device__ inline float reduceScatter16(float (&v)[16], int lane) {
  reduceScatterStep<8, 16>(v, lane);
  reduceScatterStep<4, 8>(v, lane);
  reduceScatterStep<2, 4>(v, lane);
  reduceScatterStep<1, 2>(v, lane);
  return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}

/// The diagonal 16 x 16 blocks of P (unscaled) into sm.pd, by decay chains: the pair factor
/// exp(bq_t - b_s) of a channel is the product of the per-token decays a_u = exp(g_u) from s + 1
/// to t (inclusive; to t - 1 exclusive), so walking t upward from s, the running key z = k_s . prod a
/// takes one multiply per step and a pair costs a multiply and a fused multiply-add per channel,
/// no exponential (the exponentials are a's, one per token and channel). A warp owns one block and
/// half of its source tokens s, {0, 3, 4, 7, ...} or {1, 2, 5, 6, ...} (equal work: 68 pairs
/// each); a lane owns DK / 32 adjacent channels (2, 4 or 8), and the sum over channels is
/// reduceScatter16.
/// Exclusive readout: P[t][t] is the bonus q_t . (u * k_t).
template <class T, int DK, bool kExclusive, class Smem>
__device__ void diagonalBlocksByChains(Smem& sm, const float* a /* [C, DK] */) {
  constexpr int NB = Smem::kBlock, LdH = Smem::kLdH, CPL = DK / 32;
  static_assert(CPL == 2 || CPL == 4 || CPL == 8, "DK 64, 128 or 256");
  static_assert(kDiagonalPrepareThreads == 2 * 32 * (Smem::C / NB), "two warps per diagonal block");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c0 = lane * CPL;
  const int blk = warp / 2, half = warp % 2;
  auto loadRow = [&](const T* base, int row, float (&out)[CPL]) {  // CPL 16-bit values at (row, c0)
    const T* src = base + row * LdH + c0;
    if constexpr (CPL == 8) {
      const uint4 w = *reinterpret_cast<const uint4*>(src);
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
      CUTE_UNROLL
      for (int j = 0; j < 4; ++j) {
        const float2 f = unpack2<T>(words[j]);
        out[2 * j] = f.x; out[2 * j + 1] = f.y;
      }
    } else if constexpr (CPL == 4) {
      const uint2 w = *reinterpret_cast<const uint2*>(src);
      const float2 lo = unpack2<T>(w.x), hi = unpack2<T>(w.y);
      out[0] = lo.x; out[1] = lo.y; out[2] = hi.x; out[3] = hi.y;
    } else {
      const float2 f = unpack2<T>(*reinterpret_cast<const uint32_t*>(src));
      out[0] = f.x; out[1] = f.y;
    }
  };
  auto loadDecay = [&](int row, float (&out)[CPL]) {
    const float* src = a + row * DK + c0;
    if constexpr (CPL == 8) {
      const float4 lo = *reinterpret_cast<const float4*>(src), hi = *reinterpret_cast<const float4*>(src + 4);
      out[0] = lo.x; out[1] = lo.y; out[2] = lo.z; out[3] = lo.w;
      out[4] = hi.x; out[5] = hi.y; out[6] = hi.z; out[7] = hi.w;
    } else if constexpr (CPL == 4) {
      const float4 f = *reinterpret_cast<const float4*>(src);
      out[0] = f.x; out[1] = f.y; out[2] = f.z; out[3] = f.w;
    } else {
      const float2 f = *reinterpret_cast<const float2*>(src);
      out[0] = f.x; out[1] = f.y;
    }
  };
  for (int i = 0; i < NB / 4; ++i)
    for (int pick = 0; pick < 2; ++pick) {
      const int s = 4 * i + (half == 0 ? (pick == 0 ? 0 : 3) : (pick == 0 ? 1 : 2));
      const int first = kExclusive ? s + 1 : s;  // the first decayed row
      float z[CPL];
      loadRow(sm.k, blk * NB + s, z);
      float part[NB];
      CUTE_UNROLL
      for (int t = 0; t < NB; ++t) {
        part[t] = 0.f;
        if (t < s) continue;  // warp-uniform
        float q[CPL];
        loadRow(sm.q, blk * NB + t, q);
        if (kExclusive && t == s) {
          CUTE_UNROLL
          for (int j = 0; j < CPL; ++j) part[t] = fmaf(q[j] * sm.u[c0 + j], z[j], part[t]);
          continue;
        }
        if (t > first) {
          float dec[CPL];
          loadDecay(blk * NB + (kExclusive ? t - 1 : t), dec);
          CUTE_UNROLL
          for (int j = 0; j < CPL; ++j) z[j] *= dec[j];
        }
        CUTE_UNROLL
        for (int j = 0; j < CPL; ++j) part[t] = fmaf(q[j], z[j], part[t]);
      }
      const float sum = reduceScatter16(part, lane);
      if ((lane & 1) == 0) sm.pd[blk][lane >> 1][s] = sum;
    }
}

template <class T, int DK, bool kExclusive>
__global__ void __launch_bounds__(kDiagonalPrepareThreads, 2)
    diagonalPrepareKernel(const ForwardParams p, const DiagonalOutputs out) {
  using Smem = DiagonalPrepareSmem<T, DK>;
  constexpr int C = Smem::C, NB = Smem::kBlock, LdH = Smem::kLdH, LdB = Smem::kLdB,
                LdX = Smem::kLdX, kThreads = kDiagonalPrepareThreads;
  static_assert(DK % 8 == 0 && C % NB == 0, "shapes");
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = *reinterpret_cast<Smem*>(smemRaw);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, h = blockIdx.y, H = p.heads;
  const int64_t tok0 = bos + chunk * C, slot = coff + chunk;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowK = int64_t(H) * DK;
  const T* q = static_cast<const T*>(p.q) + tok0 * rowK + int64_t(h) * DK;
  const T* k = static_cast<const T*>(p.k) + tok0 * rowK + int64_t(h) * DK;
  const float* g = p.g + tok0 * rowK + int64_t(h) * DK;  // [B, T, H, dk]

  // Loads, all in flight at once (16-byte cp.async): q, k (16-bit), g (fp32); zeros past the end.
  const auto smem = [](const void* ptr) { return static_cast<uint32_t>(__cvta_generic_to_shared(ptr)); };
  for (int i = tid; i < C * DK / 8; i += kThreads) {
    const int t = i / (DK / 8), c = (i % (DK / 8)) * 8;
    const bool valid = t < rows;
    const int64_t off = valid ? t * rowK + c : 0;
    copy16(smem(&sm.q[t * LdH + c]), q + off, valid);
    copy16(smem(&sm.k[t * LdH + c]), k + off, valid);
  }
  for (int i = tid; i < C * DK / 4; i += kThreads) {
    const int t = i / (DK / 4), c = (i % (DK / 4)) * 4;
    const bool valid = t < rows;
    copy16(smem(&sm.b[t * LdB + c]), g + (valid ? t * rowK + c : 0), valid);
  }
  copyCommit();
  if constexpr (kExclusive) {
    for (int c = tid; c < DK; c += kThreads) sm.u[c] = p.bonus[int64_t(h) * DK + c];
  }
  copyWait<0>();
  __syncthreads();
  float* a = sm.x;  // [C, DK] per-token decays exp(g), until the off-diagonal blocks take x
  for (int c = tid; c < DK; c += kThreads) {  // b: cumsum along t, one channel a thread
    float run = 0.f;
    for (int t = 0; t < C; ++t) {
      const float gt = sm.b[t * LdB + c];
      a[t * DK + c] = __expf(fminf(gt, 0.f));
      run += gt;
      sm.b[t * LdB + c] = run;
    }
  }
  __syncthreads();

  auto qf = [&](int t, int c) { return float(sm.q[t * LdH + c]); };
  auto kf = [&](int t, int c) { return float(sm.k[t * LdH + c]); };
  auto bq = [&](int t, int c) {
    if constexpr (kExclusive) return t > 0 ? sm.b[(t - 1) * LdB + c] : 0.f;
    else return sm.b[t * LdB + c];
  };
  auto bAt = [&](int t, int c) { return sm.b[t * LdB + c]; };

  // qd, kd, decay.
  {
    T* qd = static_cast<T*>(out.qd) + tok0 * rowK + int64_t(h) * DK;
    T* kd = static_cast<T*>(out.kd) + tok0 * rowK + int64_t(h) * DK;
    for (int i = tid; i < rows * DK / 2; i += kThreads) {
      const int t = i / (DK / 2), c = (i % (DK / 2)) * 2;
      const float q0 = p.scale * qf(t, c) * __expf(bq(t, c));
      const float q1 = p.scale * qf(t, c + 1) * __expf(bq(t, c + 1));
      const float k0 = kf(t, c) * __expf(bAt(C - 1, c) - bAt(t, c));
      const float k1 = kf(t, c + 1) * __expf(bAt(C - 1, c + 1) - bAt(t, c + 1));
      *reinterpret_cast<uint32_t*>(qd + t * rowK + c) = pack2<T>(q0, q1);
      *reinterpret_cast<uint32_t*>(kd + t * rowK + c) = pack2<T>(k0, k1);
    }
    for (int c = tid; c < DK; c += kThreads)
      out.decay[(slot * H + h) * DK + c] = __expf(bAt(C - 1, c));
  }

  T* P = static_cast<T*>(out.p) + (slot * H + h) * int64_t(C) * C;  // [C, C]
  // Diagonal blocks, then written with the zeros right of them (s > t inside a block, and every
  // block right of the diagonal).
  diagonalBlocksByChains<T, DK, kExclusive>(sm, a);
  __syncthreads();
  for (int i = tid; i < C * C / 2; i += kThreads) {
    const int t = i / (C / 2), s = (i % (C / 2)) * 2;
    if (s / NB < t / NB) continue;  // below the diagonal blocks: the loop after this one
    const bool diag = s / NB == t / NB;
    const float v0 = diag && s <= t ? sm.pd[t / NB][t % NB][s % NB] : 0.f;
    const float v1 = diag && s + 1 <= t ? sm.pd[t / NB][t % NB][s % NB + 1] : 0.f;
    *reinterpret_cast<uint32_t*>(P + t * C + s) = pack2<T>(p.scale * v0, p.scale * v1);
  }

  // Blocks below the diagonal: block row bi against the columns of blocks 0 .. bi - 1, through
  // the reference r = b at row bi * NB - 1. x holds the block row's NB scaled query rows, then
  // the bi * NB scaled key rows.
  for (int bi = 1; bi < C / NB; ++bi) {
    const int ref = bi * NB - 1, keys = bi * NB;
    __syncthreads();  // the previous block row's x (the first time: a) is consumed
    for (int i = tid; i < (NB + keys) * DK; i += kThreads) {
      const int r = i / DK, c = i % DK;
      const float rc = bAt(ref, c);
      sm.x[r * LdX + c] = r < NB ? qf(bi * NB + r, c) * __expf(bq(bi * NB + r, c) - rc)
                                 : kf(r - NB, c) * __expf(rc - bAt(r - NB, c));
    }
    __syncthreads();
    // P[block row bi][keys] = (scaled queries) (scaled keys)^T on the tensor cores, a warp per
    // 16 x 8 tile, 1xTF32: P is rounded to the 16-bit input dtype next (as every path rounds it),
    // and a numpy model of these blocks (random q, k, gates) puts the rounded P's relative error at
    // 1.62e-3 against 3xTF32's 1.61e-3 in bf16 (the rounding's own), 3.4e-4 against 2.1e-4 in
    // fp16: 3xTF32's two more products and operand splits bought nothing measurable.
    const int warp = tid / 32;
    for (int nt = warp; nt < keys / 8; nt += kThreads / 32) {
      float acc[1][4];
      tile::zeroAcc(acc);
      tile::warpTileProduct<1, false>(
          acc, 0, 8 * nt, DK, [&](int m, int c) { return sm.x[m * LdX + c]; },
          [&](int c, int n) { return sm.x[(NB + n) * LdX + c]; });
      const tile::Lane ln;
      const int t = bi * NB + ln.g, s = 8 * nt + 2 * ln.q;
      *reinterpret_cast<uint32_t*>(P + t * C + s) = pack2<T>(p.scale * acc[0][0], p.scale * acc[0][1]);
      *reinterpret_cast<uint32_t*>(P + (t + 8) * C + s) = pack2<T>(p.scale * acc[0][2], p.scale * acc[0][3]);
    }
  }
}

}  // namespace linac::kernels::cuda::hopper
