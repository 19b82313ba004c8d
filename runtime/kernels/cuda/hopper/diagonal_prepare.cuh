// Hopper forward, preparation stage of a diagonal (per key channel) decay with the additive rule
// (GLA, HGRN-2, RWKV-6): chunk-parallel, one CTA of eight warps per (chunk slot, head). Everything
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

// Two CTAs of eight warps per SM: every loop below is a chain of shared-memory loads and
// exponentials, and four warps per scheduler hide each other's latency where one could not.
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
  float x[C * kLdX];                       // scaled rows of one block row: A rows, then B rows
  float u[DK];
};

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
  for (int c = tid; c < DK; c += kThreads) {  // b: cumsum along t, one channel a thread
    float run = 0.f;
    for (int t = 0; t < C; ++t) {
      run += sm.b[t * LdB + c];
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
  // Zeros above the diagonal: blocks right of it, and the 2 x 2 tiles right of the diagonal tiles
  // inside the diagonal blocks (the elementwise pass below writes the tiles on and under it).
  for (int i = tid; i < C * C / 2; i += kThreads) {
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
    for (int i = tid; i < (NB + keys) * DK; i += kThreads) {
      const int r = i / DK, c = i % DK;
      const float rc = bAt(ref, c);
      sm.x[r * LdX + c] = r < NB ? qf(bi * NB + r, c) * __expf(bq(bi * NB + r, c) - rc)
                                 : kf(r - NB, c) * __expf(rc - bAt(r - NB, c));
    }
    __syncthreads();
    // 2 x 2 output tiles: NB / 2 x keys / 2 of them.
    for (int tile = tid; tile < (NB / 2) * (keys / 2); tile += kThreads) {
      const int ta = tile / (keys / 2), tb = tile % (keys / 2);
      const float* a0 = &sm.x[(2 * ta) * LdX];
      const float* a1 = a0 + LdX;
      const float* b0 = &sm.x[(NB + 2 * tb) * LdX];
      const float* b1 = b0 + LdX;
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
  // quarter of the channels: c = 4 j + quarter, so a tile's four lanes read adjacent channels);
  // the four quarters of a tile sit in consecutive lanes and are summed by shuffles, so every sum
  // has one fixed order.
  constexpr int kTilesPerSide = NB / 2;
  constexpr int kLowerTiles = kTilesPerSide * (kTilesPerSide + 1) / 2;  // per diagonal block
  constexpr int kItems = (C / NB) * kLowerTiles * 4;
  constexpr int kQuarter = DK / 4;
  for (int base = 0; base < kItems; base += kThreads) {
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
      for (int j = 0; j < kQuarter; ++j) {
        const int c = 4 * j + quarter;
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
