// Hopper forward, preparation stage of a diagonal (per key channel) decay with the additive rule
// (GLA, HGRN-2, RWKV-6): chunk-parallel, one CTA (one warpgroup) per (chunk slot, head). Everything
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
// exponents <= 0, so it is a product of scaled rows (one exponent per element, not per pair); a
// diagonal block sums the pairs elementwise. Strong gates underflow to 0, never overflow.
// Outputs in the input dtype except decay (fp32): qd, kd [B, T, H, dk]; P [slots, H, C, C];
// decay [slots, H, dk].
#pragma once

#include "../chunk_slots.cuh"
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

template <class T, int DK>
struct DiagonalPrepareSmem {
  static constexpr int C = kChunk;
  static constexpr int kBlock = 16;        // token block of the factorisation
  static constexpr int kLdH = DK + 8;      // 16-bit rows, 16-byte aligned
  static constexpr int kLdF = DK + 1;      // fp32 rows read by column
  T q[C * kLdH];
  T k[C * kLdH];
  float b[C * kLdF];                       // g, then its in-chunk cumsum
  float x[C * kLdF];                       // scaled rows of one block row: A rows, then B rows
  float u[DK];
};

template <class T, int DK, bool kExclusive>
__global__ void __launch_bounds__(kWarpgroupThreads, 2)
    diagonalPrepareKernel(const ForwardParams p, const DiagonalOutputs out) {
  using Smem = DiagonalPrepareSmem<T, DK>;
  constexpr int C = Smem::C, NB = Smem::kBlock, LdH = Smem::kLdH, LdF = Smem::kLdF;
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

  // Loads: q, k (16-bit, 16-byte vectors), g (fp32, 4-float vectors), u; zeros past the end.
  for (int i = tid; i < C * DK / 8; i += kWarpgroupThreads) {
    const int t = i / (DK / 8), c = (i % (DK / 8)) * 8;
    uint4 qv = make_uint4(0, 0, 0, 0), kv = qv;
    if (t < rows) {
      qv = *reinterpret_cast<const uint4*>(q + t * rowK + c);
      kv = *reinterpret_cast<const uint4*>(k + t * rowK + c);
    }
    *reinterpret_cast<uint4*>(&sm.q[t * LdH + c]) = qv;
    *reinterpret_cast<uint4*>(&sm.k[t * LdH + c]) = kv;
  }
  for (int i = tid; i < C * DK / 4; i += kWarpgroupThreads) {
    const int t = i / (DK / 4), c = (i % (DK / 4)) * 4;
    const float4 gv = t < rows ? *reinterpret_cast<const float4*>(g + t * rowK + c)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
    float* dst = &sm.b[t * LdF + c];
    dst[0] = gv.x;
    dst[1] = gv.y;
    dst[2] = gv.z;
    dst[3] = gv.w;
  }
  if constexpr (kExclusive) {
    for (int c = tid; c < DK; c += kWarpgroupThreads) sm.u[c] = p.bonus[int64_t(h) * DK + c];
  }
  __syncthreads();
  for (int c = tid; c < DK; c += kWarpgroupThreads) {  // b: cumsum along t, one channel a thread
    float run = 0.f;
    for (int t = 0; t < C; ++t) {
      run += sm.b[t * LdF + c];
      sm.b[t * LdF + c] = run;
    }
  }
  __syncthreads();

  auto qf = [&](int t, int c) { return float(sm.q[t * LdH + c]); };
  auto kf = [&](int t, int c) { return float(sm.k[t * LdH + c]); };
  auto bq = [&](int t, int c) {
    if constexpr (kExclusive) return t > 0 ? sm.b[(t - 1) * LdF + c] : 0.f;
    else return sm.b[t * LdF + c];
  };
  auto bAt = [&](int t, int c) { return sm.b[t * LdF + c]; };

  // qd, kd, decay.
  {
    T* qd = static_cast<T*>(out.qd) + tok0 * rowK + int64_t(h) * DK;
    T* kd = static_cast<T*>(out.kd) + tok0 * rowK + int64_t(h) * DK;
    for (int i = tid; i < rows * DK / 2; i += kWarpgroupThreads) {
      const int t = i / (DK / 2), c = (i % (DK / 2)) * 2;
      const float q0 = p.scale * qf(t, c) * __expf(bq(t, c));
      const float q1 = p.scale * qf(t, c + 1) * __expf(bq(t, c + 1));
      const float k0 = kf(t, c) * __expf(bAt(C - 1, c) - bAt(t, c));
      const float k1 = kf(t, c + 1) * __expf(bAt(C - 1, c + 1) - bAt(t, c + 1));
      *reinterpret_cast<uint32_t*>(qd + t * rowK + c) = pack2<T>(q0, q1);
      *reinterpret_cast<uint32_t*>(kd + t * rowK + c) = pack2<T>(k0, k1);
    }
    for (int c = tid; c < DK; c += kWarpgroupThreads)
      out.decay[(slot * H + h) * DK + c] = __expf(bAt(C - 1, c));
  }

  T* P = static_cast<T*>(out.p) + (slot * H + h) * int64_t(C) * C;  // [C, C]
  // Zeros above the diagonal: blocks right of it, and the 2 x 2 tiles right of the diagonal tiles
  // inside the diagonal blocks (the elementwise pass below writes the tiles on and under it).
  for (int i = tid; i < C * C / 2; i += kWarpgroupThreads) {
    const int t = i / (C / 2), s = (i % (C / 2)) * 2;
    const bool above = s / NB > t / NB || (s / NB == t / NB && (s % NB) / 2 > (t % NB) / 2);
    if (above) *reinterpret_cast<uint32_t*>(P + t * C + s) = 0u;
  }

  // Blocks below the diagonal: block row bi against the columns of blocks 0 .. bi - 1, through
  // the reference r = b at row bi * NB - 1. x holds the block row's NB scaled query rows, then
  // the bi * NB scaled key rows.
  for (int bi = 1; bi < C / NB; ++bi) {
    const int ref = bi * NB - 1, keys = bi * NB;
    __syncthreads();  // the previous block row's x is consumed
    for (int i = tid; i < (NB + keys) * DK; i += kWarpgroupThreads) {
      const int r = i / DK, c = i % DK;
      const float rc = bAt(ref, c);
      sm.x[r * LdF + c] = r < NB ? qf(bi * NB + r, c) * __expf(bq(bi * NB + r, c) - rc)
                                 : kf(r - NB, c) * __expf(rc - bAt(r - NB, c));
    }
    __syncthreads();
    // 2 x 2 output tiles: NB / 2 x keys / 2 of them.
    for (int tile = tid; tile < (NB / 2) * (keys / 2); tile += kWarpgroupThreads) {
      const int ta = tile / (keys / 2), tb = tile % (keys / 2);
      const float* a0 = &sm.x[(2 * ta) * LdF];
      const float* a1 = a0 + LdF;
      const float* b0 = &sm.x[(NB + 2 * tb) * LdF];
      const float* b1 = b0 + LdF;
      float s00 = 0.f, s01 = 0.f, s10 = 0.f, s11 = 0.f;
#pragma unroll 8
      for (int c = 0; c < DK; ++c) {
        const float x0 = a0[c], x1 = a1[c], y0 = b0[c], y1 = b1[c];
        s00 += x0 * y0;
        s01 += x0 * y1;
        s10 += x1 * y0;
        s11 += x1 * y1;
      }
      const int t = bi * NB + 2 * ta, s = 2 * tb;
      *reinterpret_cast<uint32_t*>(P + t * C + s) = pack2<T>(p.scale * s00, p.scale * s01);
      *reinterpret_cast<uint32_t*>(P + (t + 1) * C + s) = pack2<T>(p.scale * s10, p.scale * s11);
    }
  }

  // Diagonal blocks, elementwise: work items (2 x 2 pair tile on or below the block diagonal,
  // quarter of the channels); the four quarters of a tile sit in consecutive lanes and are summed
  // by shuffles, so every sum has one fixed order.
  constexpr int kTilesPerSide = NB / 2;
  constexpr int kLowerTiles = kTilesPerSide * (kTilesPerSide + 1) / 2;  // per diagonal block
  constexpr int kItems = (C / NB) * kLowerTiles * 4;
  constexpr int kQuarter = DK / 4;
  for (int base = 0; base < kItems; base += kWarpgroupThreads) {
    const int item = base + tid, tile = item / 4, quarter = item % 4;
    const bool valid = item < kItems;
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    int t0 = 0, s0 = 0;
    if (valid) {
      const int blk = tile / kLowerTiles, lt = tile % kLowerTiles;
      int ta = 0;  // lower-triangular tile index lt -> (ta, tb), tb <= ta
      while ((ta + 1) * (ta + 2) / 2 <= lt) ++ta;
      const int tb = lt - ta * (ta + 1) / 2;
      t0 = blk * NB + 2 * ta;
      s0 = blk * NB + 2 * tb;
      for (int c = quarter * kQuarter; c < (quarter + 1) * kQuarter; ++c) {
        CUTE_UNROLL
        for (int i = 0; i < 2; ++i)
          CUTE_UNROLL
          for (int j = 0; j < 2; ++j) {
            const int t = t0 + i, s = s0 + j;
            const bool decayed = kExclusive ? s < t : s <= t;
            float term = 0.f;
            if (decayed) term = qf(t, c) * kf(s, c) * __expf(fminf(bq(t, c) - bAt(s, c), 0.f));
            if constexpr (kExclusive) {
              if (s == t) term = qf(t, c) * sm.u[c] * kf(t, c);
            }
            acc[i][j] += term;
          }
      }
    }
    CUTE_UNROLL
    for (int i = 0; i < 2; ++i)
      CUTE_UNROLL
      for (int j = 0; j < 2; ++j) {
        acc[i][j] += __shfl_xor_sync(0xffffffffu, acc[i][j], 1);
        acc[i][j] += __shfl_xor_sync(0xffffffffu, acc[i][j], 2);
      }
    if (valid && quarter == 0) {
      *reinterpret_cast<uint32_t*>(P + t0 * C + s0) =
          pack2<T>(p.scale * acc[0][0], p.scale * acc[0][1]);
      *reinterpret_cast<uint32_t*>(P + (t0 + 1) * C + s0) =
          pack2<T>(p.scale * acc[1][0], p.scale * acc[1][1]);
    }
  }
}

}  // namespace linac::kernels::cuda::hopper
