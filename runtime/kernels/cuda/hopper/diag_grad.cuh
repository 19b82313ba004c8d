// Hopper backward, chunk-parallel gradients of the additive rule with a DIAGONAL decay (GLA,
// HGRN-2, RWKV-6; readout Inclusive or ExclusiveBonus), 16-bit inputs, dk and dv in {64, 128}
// (and dv in value blocks of 128, below):
// the wgmma replacement of chunk_backward_diagonal.cu's passes 2 and 3
// (chunk_backward_diagonal_dqdk.cu, chunk_backward_diagonal_dv.cu), reading the state passes'
// workspaces S_c and dS_{c+1} in the input dtype (diag_state_scan.cuh; that file's header and
// chunk_backward_diagonal.cu's state the maths; numpy transcription with this kernel's roundings:
// tests/runtime/cuda/diag_bwd_host_check.py).
//
// One CTA of three warpgroups per (chunk slot, head). With b[t][c] the in-chunk cumulative
// log-decay (double cumsum, kept fp32), bq_t = b_t (inclusive) or b_{t-1} (exclusive, b_{-1} = 0),
// B = b_{C-1} and the block references R_m = b_{16 m + 15} (m = 0, 1, 2):
//   D  = scale dO V^T (unmasked)                                                   warpgroup 0
//   dq = scale e^{bq} . (dO S_c^T)                                                 warpgroup 0
//        + sum_{j < 3} [t >= 16 (j + 1)] e^{bq_t - R_j} . (D[:, blk j] Ks[blk j])
//        + sum_{s <= t (< t), s in blk(t)} D[t][s] k_s e^{bq_t - b_s}             (decay chains)
//   dk = e^{B - b} . (V dS^T)                                                      warpgroup 1
//        + sum_{i >= 1} [s < 16 i] e^{R_{i-1} - b_s} . (D[blk i, :]^T Qs[blk i])
//        + sum_{t >= s (> s), t in blk(s)} D[t][s] q_t e^{bq_t - b_s}             (decay chains)
//   dv = (K e^{B - b}) dS + A^T dO,   A^T[s][t in blk i] = scale (Kr_i Qs^T)[s][t] (s < 16 i),
//        diagonal blocks by decay chains (all three warpgroups), zero where t < s  warpgroup 2
// with Ks[blk j] = k e^{R_j - b}, Qs[blk i] = q e^{bq - R_{i-1}} and Kr_i[s] = k_s e^{R_{i-1} - b_s}
// for s < 16 i (zero below): every exponent is <= 0, strong gates underflow to 0, never overflow.
// Inside the 16 x 16 diagonal blocks e^{bq_t - b_s} is a product of per-token factors e^{g_u}
// (s < u <= t, or < t exclusive), carried along s or t by one multiply a step (a decay chain, as
// diagonal_prepare.cuh's), from e^{g} computed once per (t, c) instead of an exponential a term.
// The 16-token factorisation is diagonal_prepare.cuh's; a block product is one k block (16) of a
// 64-row wgmma, so each reference costs one instruction group of K = 16, not a 16-row tile.
// Exclusive bonus: dq_t += D[t][t] u k_t, dk_t += D[t][t] u q_t, A[t][t] = q_t . (u k_t), and the
// d_u partial sum_t D[t][t] q_t k_t per (slot, head) (chunk_backward_diagonal.cu's pass 4 sums).
// d_g per channel, chunk-local (nothing large cancels), with dq' = dq without the bonus:
//   dg_t = e^B <S_c, dS_{c+1}> + sum_{t' >= t} (q dq' - k dk_intra)_t' + sum_{s < t} (k dk_inter)_s
//          [- q_t dq'_t exclusive]
// k dk_inter is parked in dg's own output rows (written, then read back by the same CTA), the
// other two in shared memory the tiles free at the end. Every output element belongs to one CTA
// (dg's rows serve it as scratch before their final value): deterministic, no atomics.
// Roundings: S_c, dS_{c+1} (stored so by the state passes; <S_c, dS_{c+1}> is summed from them),
// D, K e^{B - b}, Kr_i and A^T are 16-bit wgmma operands; sums and the diagonal blocks' chains are
// fp32. Ks and Qs enter as a 16-bit pair with kLowHalves (p.low_halves: where the compiler marks
// the decay's gradient precise, RecurrenceKind::preciseDecayGrad; high halves alone otherwise),
// high half then low half (x - round(x), over the same
// tiles once the high products are done): a pair (t, s) of one chunk reaches d_g twice, through
// Ks in q dq' and through Qs in k dk_intra, and cancels there unless both are near exact. Rounded
// to 16 bits once, the residue of the large intra-chunk terms swamped the small d_g of strongly
// decaying channels: RWKV-6's d_w = d_g . g (decay -exp(w)) missed the bf16 gate (1.1e-2 on the
// H200; diag_bwd_host_check.py: 3.6e-2 with one half, 1.6e-3 with both, at w ~ N(0, 1.5^2)).
// Value blocks (dv above the tile DV, the inclusive readout): every
// term of dq, dk and dg above is a sum over the value columns (D, dO S^T, V dS^T, <S_c, dS_{c+1}>),
// so a CTA per (chunk slot, head, block of DV columns) computes its block's share, as if the block
// were the whole value dim, into fp32 planes (dg's scratch rows included), and
// diagSumValueBlocksKernel adds them; dv is per column and written directly.
#pragma once

#include "diag_grad_common.cuh"

#include <algorithm>

namespace linac::kernels::cuda::hopper {

constexpr int kDiagGradThreads = 3 * kWarpgroupThreads;

template <class T, int DK, int DV>
struct DiagGradTiles {
  static constexpr int C = kChunk;
  using G = ChunkGradTiles<T, DK, DV>;
  using MmaAtO = WarpgroupMma<T, C, DV, C, GMMA::Major::K, GMMA::Major::MN>;  // A^T dO
  static_assert(DK % 64 == 0, "b's swizzle permutes 64-channel groups");
  union StatesOrDecays {  // S_c is read in phase 1 only; phase 2's decay chains read e^{g}
    alignas(1024) T s[cosize_v<typename G::St>];    // S_c [d, v]
    float a[C * DK];                                // e^{g} [t, c], unswizzled
  };
  struct Operands {  // live until the last product
    StatesOrDecays sc;
    alignas(1024) T ds[cosize_v<typename G::St>];   // dS_{c+1} [d, v]
    alignas(1024) T d[cosize_v<typename G::Sq>];    // D [t, s]
    alignas(1024) T at[cosize_v<typename G::Sq>];   // A^T [s, t]
    alignas(1024) T x[cosize_v<typename G::Qk>];    // K e^{B - b}, then Kr_1 .. Kr_3 [s, c]
  };
  struct Staging {  // after it: d_g's per-(t, c) terms, fp32, b's layout
    float p[C * DK];    // q dq'
    float kin[C * DK];  // k dk_intra, then the suffix sums
  };
  struct Smem {
    alignas(1024) T q[cosize_v<typename G::Qk>];
    alignas(1024) T k[cosize_v<typename G::Qk>];
    alignas(1024) T v[cosize_v<typename G::Vo>];
    alignas(1024) T o[cosize_v<typename G::Vo>];
    alignas(1024) T ks[cosize_v<typename G::Qk>];   // Ks [s, c]
    alignas(1024) T qs[cosize_v<typename G::Qk>];   // Qs [t, c]
    union Late {
      Operands op;
      Staging st;
    } late;
    alignas(16) float b[C * DK];  // g, then b; element (t, c) at bIndex(t, c)
    float zdot[DK];               // <S_c[c, :], dS_{c+1}[c, :]>
    float ddiag[C];               // D[t][t], fp32
    float u[DK];
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

/// Barrier over warpgroups 0 and 1 (id 4): the decay table they fill for their chains.
__device__ __forceinline__ void chainsBarrier() {
  asm volatile("bar.sync 4, %0;\n" ::"n"(2 * kWarpgroupThreads) : "memory");
}

template <class T, int DK, int DV, bool kLowHalves, bool kValueBlocks>
__global__ void __launch_bounds__(kDiagGradThreads, 1) diagGradKernel(const DiagGradParams p) {
  using Tiles = DiagGradTiles<T, DK, DV>;
  using G = typename Tiles::G;
  constexpr int C = Tiles::C, NB = kDiagBlock;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  const uint32_t pad = (1024u - (static_cast<uint32_t>(__cvta_generic_to_shared(smemRaw)) & 1023u)) & 1023u;
  auto& sm = *reinterpret_cast<typename Tiles::Smem*>(smemRaw + pad);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, wg = tid / kWarpgroupThreads, wtid = tid % kWarpgroupThreads;
  const int h = blockIdx.y, H = p.heads;
  const int64_t tok0 = bos + chunk * C, slot = coff + chunk;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  // kValueBlocks: this CTA's value block is columns [v0, v0 + DV) of the tensors' value_dim, and
  // dq, dk and dg go to the block's fp32 planes (diag_grad_params.h); else value_dim = DV
  const int dvAll = kValueBlocks ? p.value_dim : DV, v0 = kValueBlocks ? int(blockIdx.z) * DV : 0;
  const int64_t rowK = int64_t(H) * DK, rowV = int64_t(H) * dvAll;
  const int64_t partOffset = kValueBlocks ? int64_t(blockIdx.z) * p.part_plane : 0;
  float* const dgOut = kValueBlocks ? (p.dg_part ? p.dg_part + partOffset : nullptr) : p.dg;  // also phase 2-4's scratch
  const bool excl = p.exclusive != 0, wantDg = dgOut != nullptr;
  const float scale = p.scale;

  const auto tQ = smemTile(sm.q, typename G::Qk{});
  const auto tQt = smemTile(sm.q, typename G::QkT{});
  const auto tK = smemTile(sm.k, typename G::Qk{});
  const auto tV = smemTile(sm.v, typename G::Vo{});
  const auto tO = smemTile(sm.o, typename G::Vo{});
  const auto tOt = smemTile(sm.o, typename G::VoT{});
  const auto tKs = smemTile(sm.ks, typename G::Qk{});
  const auto tKst = smemTile(sm.ks, typename G::QkT{});
  const auto tQs = smemTile(sm.qs, typename G::Qk{});
  const auto tQst = smemTile(sm.qs, typename G::QkT{});
  const auto tS = smemTile(sm.late.op.sc.s, typename G::St{});
  const auto tDS = smemTile(sm.late.op.ds, typename G::St{});
  const auto tDSt = smemTile(sm.late.op.ds, typename G::StT{});
  const auto tD = smemTile(sm.late.op.d, typename G::Sq{});
  const auto tDt = smemTile(sm.late.op.d, typename G::SqT{});
  const auto tAt = smemTile(sm.late.op.at, typename G::Sq{});
  const auto tX = smemTile(sm.late.op.x, typename G::Qk{});

  auto b = [&](int t, int c) { return sm.b[bIndex<DK>(t, c)]; };
  auto b2 = [&](int t, int c) { return *reinterpret_cast<const float2*>(&sm.b[bIndex<DK>(t, c)]); };
  auto bq2 = [&](int t, int c) {
    const int i = excl ? t - 1 : t;
    return i < 0 ? make_float2(0.f, 0.f) : b2(i, c);
  };
  auto ref2 = [&](int m, int c) { return b2(NB * m + NB - 1, c); };  // R_m
  auto exp2f2 = [](float2 x) { return make_float2(expFtz(x.x), expFtz(x.y)); };
  auto sub2 = [](float2 x, float2 y) { return make_float2(x.x - y.x, x.y - y.y); };
  // Ks[t][c] = k e^{R_m - b} (block m = t / 16 < 3, else 0) and Qs[t][c] = q e^{bq - R_{m - 1}}
  // (m > 0, else 0) in fp32, channel pairs (c, c + 1): the same values each time they are formed.
  auto ksPair = [&](int t, int c) {
    const int m = t / NB;
    if (m >= kDiagRefs) return make_float2(0.f, 0.f);
    const float2 kk = unpack2<T>(lds32(tK.at(t, c))), f = exp2f2(sub2(ref2(m, c), b2(t, c)));
    return make_float2(kk.x * f.x, kk.y * f.y);
  };
  auto qsPair = [&](int t, int c) {
    const int m = t / NB;
    if (m == 0) return make_float2(0.f, 0.f);
    const float2 qq = unpack2<T>(lds32(tQ.at(t, c))), f = exp2f2(sub2(bq2(t, c), ref2(m - 1, c)));
    return make_float2(qq.x * f.x, qq.y * f.y);
  };

  // ---- loads: q, k, v, d_o, g, S_c, dS_{c+1} (cp.async); then b and <S_c, dS_{c+1}> per row ----
  {
    const int64_t offK = tok0 * rowK + int64_t(h) * DK, offV = tok0 * rowV + int64_t(h) * dvAll + v0;
    loadTile<false, C, DK, kDiagGradThreads>(tQ, 0, static_cast<const T*>(p.q) + offK, rowK, rows);
    loadTile<false, C, DK, kDiagGradThreads>(tK, 0, static_cast<const T*>(p.k) + offK, rowK, rows);
    loadTile<false, C, DV, kDiagGradThreads>(tV, 0, static_cast<const T*>(p.v) + offV, rowV, rows);
    loadTile<false, C, DV, kDiagGradThreads>(tO, 0, static_cast<const T*>(p.d_o) + offV, rowV, rows);
    const float* g = p.g + offK;
    for (int i = tid; i < C * DK / 4; i += kDiagGradThreads) {
      const int t = i / (DK / 4), c = (i % (DK / 4)) * 4;
      const bool valid = t < rows;
      copy16(static_cast<uint32_t>(__cvta_generic_to_shared(&sm.b[bIndex<DK>(t, c)])),
             g + (valid ? t * rowK + c : 0), valid);
    }
    const int64_t st = (slot * H + h) * int64_t(DK) * dvAll + v0;  // [slots, H, dk, dv]
    loadTile<false, DK, DV, kDiagGradThreads>(tS, 0, static_cast<const T*>(p.states) + st, dvAll, DK);
    loadTile<false, DK, DV, kDiagGradThreads>(tDS, 0, static_cast<const T*>(p.dstates) + st, dvAll, DK);
    copyCommit();
    if (excl)
      for (int c = tid; c < DK; c += kDiagGradThreads) sm.u[c] = p.u[int64_t(h) * DK + c];
    for (int i = tid; i < C * C; i += kDiagGradThreads) sts16(tAt.at(i / C, i % C), 0);
    copyWait<0>();
    __syncthreads();
    if (tid < DK) {  // b: cumsum along t, in double, a thread per channel, a block's loads first
      const int c = tid;
      double run = 0.0;
#pragma unroll 1
      for (int t0 = 0; t0 < C; t0 += NB) {
        float x[NB];
        CUTE_UNROLL
        for (int j = 0; j < NB; ++j) x[j] = sm.b[bIndex<DK>(t0 + j, c)];
        CUTE_UNROLL
        for (int j = 0; j < NB; ++j) {
          run += x[j];
          sm.b[bIndex<DK>(t0 + j, c)] = float(run);
        }
      }
    } else {  // meanwhile <S_c[d, :], dS_{c+1}[d, :]> per key row, from the 16-bit tiles
      for (int d = tid - DK; d < DK; d += kDiagGradThreads - DK) {
        float dot = 0.f;
        for (int v = 0; v < DV; v += 2) {
          const float2 a = unpack2<T>(lds32(tS.at(d, v))), e = unpack2<T>(lds32(tDS.at(d, v)));
          dot = fmaf(a.y, e.y, fmaf(a.x, e.x, dot));
        }
        sm.zdot[d] = dot;
      }
    }
    __syncthreads();
    // Ks (blocks 0..2, reference R_block) and Qs (blocks 1..3, reference R_{block - 1}), high
    // halves; warpgroups 0 and 1 overwrite them with the low halves in phase 2.
    forEachTilePair<C, DK, kDiagGradThreads>(
        tid,
        [&](int t, int c) {
          const float2 ks = ksPair(t, c), qs = qsPair(t, c);
          return make_uint2(pack2<T>(ks.x, ks.y), pack2<T>(qs.x, qs.y));
        },
        [&](int t, int c, uint2 x) {
          sts32(tKs.at(t, c), x.x);
          sts32(tQs.at(t, c), x.y);
        });
    fenceToAsyncProxy();
    __syncthreads();
  }
  // Writes the low halves of Ks (or Qs) over its tile, from one warpgroup, once that warpgroup's
  // products with the high halves are done; the products that follow read them.
  auto lowHalves = [&](const auto& tile, auto pair) {
    warpgroupBarrier(wg);
    forEachTilePair<C, DK, kWarpgroupThreads>(
        wtid, [&](int t, int c) { return lowHalf2<T>(pair(t, c)); },
        [&](int t, int c, uint32_t x) { sts32(tile.at(t, c), x); });
    fenceToAsyncProxy();
    warpgroupBarrier(wg);
  };

  // Each warpgroup runs its own phases between CTA barriers (its accumulators live only in its
  // branch): 1. A^T's diagonal blocks (each a third), then D and dq_inter (0), dk_inter (1), A^T's
  // other blocks (2); 2. dq and dk off-diagonal blocks, then
  // their diagonal blocks (0, 1), dv (2); 3. d_g's per-(t, c) terms into the freed operand tiles,
  // the bonus, dq and dk stored (0, 1), the d_u partials (2).
  typename G::MmaXS mmaXS;
  const auto cX = accCoords<C, DK>(mmaXS);
  // e^{g} per (t, c), the exact per-token factors of the diagonal blocks' decay chains (a
  // difference of b would carry b's rounding), filled by warpgroups 0 and 1 in phase 2 into S_c's
  // tile, which only phase 1 reads; 1 past the sequence's end.
  float* decay = sm.late.op.sc.a;
  // kBatch loads of g are issued before their stores (a load after a store the compiler cannot
  // tell apart from it would wait for the previous one's global round trip).
  auto fillDecays = [&] {
    const float* g = p.g + tok0 * rowK + int64_t(h) * DK;
    constexpr int kThreads = 2 * kWarpgroupThreads, kBatch = 4, kQuads = C * DK / 4;
    static_assert(kQuads % (kThreads * kBatch) == 0, "whole batches of float4");
#pragma unroll 1
    for (int i0 = tid; i0 < kQuads; i0 += kThreads * kBatch) {
      float4 x[kBatch];
      CUTE_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        const int i = i0 + j * kThreads, t = i / (DK / 4), c = (i % (DK / 4)) * 4;
        x[j] = t < rows ? *reinterpret_cast<const float4*>(g + t * rowK + c) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      CUTE_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        const int i = i0 + j * kThreads, t = i / (DK / 4), c = (i % (DK / 4)) * 4;
        *reinterpret_cast<float4*>(&decay[t * DK + c]) =
            make_float4(expFtz(x[j].x), expFtz(x[j].y), expFtz(x[j].z), expFtz(x[j].w));
      }
    }
  };
  // A thread's accumulator rows (the wgmma layout): r and r + 8 of its warp's 16, one block.
  constexpr int kAccRegs = decltype(size(cX))::value, kChainRegs = kAccRegs / chainParts<kAccRegs>();
  const int accRow = int(get<0>(cX(0))), blk0 = accRow & ~(NB - 1);
  float* stP = sm.late.st.p;
  float* stK = sm.late.st.kin;
  const float* u = sm.u;
  // A^T's diagonal blocks, shared by the three warpgroups at the start of phase 1 (alone they
  // kept warpgroup 2 busy while 0 and 1 waited at the barrier): warp w of a warpgroup takes block
  // w, and warpgroup g its source tokens s = g, g + 3, ...; a lane DK / 32 channels. Per source
  // token a decay chain runs up the block: w = k_s e^{bq_t - b_s} steps from t to t + 1 by one
  // multiply with the lane's e^{g} (registers), no exponential per term; the sum over channels by
  // reduceScatter16 (diagonal_prepare.cuh). Exclusive: A[t][t] = q_t . (u k_t).
  auto diagonalBlocksOfAt = [&] {
    constexpr int CPL = DK / 32, kGroups = kDiagGradThreads / kWarpgroupThreads;
    const int warp = wtid / 32, lane = wtid % 32, c0 = lane * CPL, s0 = warp * NB;
    float ga[NB][CPL];  // e^{g_{s0 + ui}} of channels c0 ..
    {
      const float* g = p.g + tok0 * rowK + int64_t(h) * DK + c0;
      CUTE_UNROLL
      for (int ui = 0; ui < NB; ++ui)
        CUTE_UNROLL
        for (int j = 0; j < CPL; ++j) ga[ui][j] = s0 + ui < rows ? expFtz(g[(s0 + ui) * rowK + j]) : 1.f;
    }
    auto diagonalBlock = [&](auto exclusive) {  // the readout as a constant: no select a term
      constexpr bool kExcl = decltype(exclusive)::value;
#pragma unroll 1
      for (int si = wg; si < NB; si += kGroups) {
        const int s = s0 + si;
        float w[CPL];
        CUTE_UNROLL
        for (int j = 0; j < CPL; j += 2) {
          const float2 x = unpack2<T>(lds32(tK.at(s, c0 + j)));
          w[j] = x.x; w[j + 1] = x.y;
        }
        float part[NB];
        CUTE_UNROLL
        for (int ti = 0; ti < NB; ++ti) {
          part[ti] = 0.f;
          if (ti < si) continue;  // warp-uniform
          const int t = s0 + ti;
          float x = 0.f;
          if (kExcl && ti == si) {  // the bonus; A[s + 1][s] has no decay either
            CUTE_UNROLL
            for (int j = 0; j < CPL; j += 2) {
              const float2 qq = unpack2<T>(lds32(tQ.at(t, c0 + j)));
              x += qq.x * sm.u[c0 + j] * w[j] + qq.y * sm.u[c0 + j + 1] * w[j + 1];
            }
            part[ti] = x;
            continue;
          }
          CUTE_UNROLL
          for (int j = 0; j < CPL; j += 2) {
            const float2 qq = unpack2<T>(lds32(tQ.at(t, c0 + j)));
            x = fmaf(qq.y, w[j + 1], fmaf(qq.x, w[j], x));
          }
          part[ti] = x;
          if (ti + 1 < NB)  // to t + 1: times e^{g_{t+1}} (exclusive e^{g_t})
            CUTE_UNROLL
            for (int j = 0; j < CPL; ++j) w[j] *= ga[kExcl ? ti : ti + 1][j];
        }
        const float sum = reduceScatter16(part, lane);
        const int ti = lane >> 1;
        if ((lane & 1) == 0 && ti >= si) sts16(tAt.at(s, s0 + ti), pack1<T>(scale * sum));
      }
    };
    if (excl)
      diagonalBlock(std::true_type{});
    else
      diagonalBlock(std::false_type{});
  };
  diagonalBlocksOfAt();
  if (wg == 0) {
    Tensor acc = partition_fragment_C(mmaXS, Shape<Int<C>, Int<DK>>{});  // dq
    {
      typename G::MmaOV mma;
      auto thr = mma.get_thread_slice(wtid);
      Tensor accD = partition_fragment_C(mma, Shape<Int<C>, Int<C>>{});
      issue(accD);
      gemm<true>(mma, thr.partition_fragment_A(tO.tensor()(_, _, 0)),
                 thr.partition_fragment_B(tV.tensor()(_, _, 0)), accD);
      commitAndWait(accD);
      forEachPair<typename G::MmaOV>(accCoords<C, C>(mma), [&](int i, int t, int s) {
        const float d0 = scale * accD(i), d1 = scale * accD(i + 1);
        sts32(tD.at(t, s), pack2<T>(d0, d1));
        if (s == t) sm.ddiag[t] = d0;
        if (s + 1 == t) sm.ddiag[t] = d1;
      });
      auto thrX = mmaXS.get_thread_slice(wtid);
      issue(acc);
      gemm<true>(mmaXS, thrX.partition_fragment_A(tO.tensor()(_, _, 0)),
                 thrX.partition_fragment_B(tS.tensor()(_, _, 0)), acc);
      commitAndWait(acc);
      forEachPair<typename G::MmaXS>(cX, [&](int i, int t, int c) {
        const float2 f = exp2f2(bq2(t, c));
        acc(i) *= scale * f.x;
        acc(i + 1) *= scale * f.y;
      });
    }
    fenceToAsyncProxy();
    ctaBarrier();
    fillDecays();
    {
      typename G::MmaDK mma;
      auto thr = mma.get_thread_slice(wtid);
      const auto fA = thr.partition_fragment_A(tD.tensor()(_, _, 0));
      const auto fB = thr.partition_fragment_B(tKst.tensor()(_, _, 0));
      Tensor tmp = partition_fragment_C(mmaXS, Shape<Int<C>, Int<DK>>{});
#pragma unroll 1
      for (int half = 0; half < (kLowHalves ? 2 : 1); ++half) {  // Ks's high halves, then its low halves
        if (half == 1) lowHalves(tKs, ksPair);
#pragma unroll 1
        for (int j = 0; j < kDiagRefs; ++j) {  // s in block j: rows t in later blocks
          issue(tmp);
          mma.accumulate_ = GMMA::ScaleOut::Zero;
          cute::gemm(mma, fA(_, _, j), fB(_, _, j), tmp);
          commitAndWait(tmp);
          forEachPair<typename G::MmaXS>(cX, [&](int i, int t, int c) {
            if (t >= NB * (j + 1)) {
              const float2 f = exp2f2(sub2(bq2(t, c), ref2(j, c)));
              acc(i) += f.x * tmp(i);
              acc(i + 1) += f.y * tmp(i + 1);
            }
          });
        }
      }
      // diagonal block by decay chains: s walks down the block while f carries
      // e^{bq_t - b_s} = prod_{u = s + 1}^{t'} e^{g_u} (t' = t, or t - 1 exclusive) per (row,
      // channel): 1 at s = t', one multiply a step below it, 0 above (chainStep). A term costs two
      // FMAs and a multiply beside its loads, no exponential; the accumulator is taken kChainRegs
      // registers at a time, so the products fit beside it.
      chainsBarrier();
      CUTE_UNROLL
      for (int part = 0; part < kAccRegs; part += kChainRegs) {
        float f[kChainRegs];
        CUTE_UNROLL
        for (int j = 0; j < kChainRegs; ++j) f[j] = 0.f;
#pragma unroll 1
        for (int s = blk0 + NB - 1; s >= blk0; --s) {
          const int lead = excl ? 1 : 0;  // row t's chain starts at s = t - lead
          const float2 d = make_float2(unpack1<T>(lds16(tD.at(accRow, s))), unpack1<T>(lds16(tD.at(accRow + 8, s))));
          const float2 e = make_float2(s == accRow - lead ? 1.f : 0.f, s == accRow + 8 - lead ? 1.f : 0.f);
          // e^{g_{s+1}} (at the chunk's last row any row will do: f is 0 or restarts there)
          chainStep<T>(acc, f, part, cX, accRow, decay + (s + 1 < C ? s + 1 : s) * DK, tK, s, d, e);
        }
      }
    }
    ctaBarrier();  // every product done: the operand tiles are free for d_g's staging
    {
      T* dq = static_cast<T*>(p.dq) + tok0 * rowK + int64_t(h) * DK;
      float* dqPart = kValueBlocks && p.dq_part ? p.dq_part + partOffset + tok0 * rowK + int64_t(h) * DK : nullptr;
      forEachPair<typename G::MmaXS>(cX, [&](int i, int t, int c) {
        const float2 qq = unpack2<T>(lds32(tQ.at(t, c)));
        if (wantDg)
          *reinterpret_cast<float2*>(&stP[bIndex<DK>(t, c)]) = make_float2(qq.x * acc(i), qq.y * acc(i + 1));
        float x0 = acc(i), x1 = acc(i + 1);
        if (excl) {
          const float2 kk = unpack2<T>(lds32(tK.at(t, c)));
          x0 += sm.ddiag[t] * u[c] * kk.x;
          x1 += sm.ddiag[t] * u[c + 1] * kk.y;
        }
        if (t >= rows) return;
        if constexpr (kValueBlocks) {
          if (dqPart) *reinterpret_cast<float2*>(dqPart + t * rowK + c) = make_float2(x0, x1);
        } else if (p.dq) {
          *reinterpret_cast<uint32_t*>(dq + t * rowK + c) = pack2<T>(x0, x1);
        }
      });
    }
  } else if (wg == 1) {
    Tensor acc = partition_fragment_C(mmaXS, Shape<Int<C>, Int<DK>>{});  // dk
    {
      auto thrX = mmaXS.get_thread_slice(wtid);
      issue(acc);
      gemm<true>(mmaXS, thrX.partition_fragment_A(tV.tensor()(_, _, 0)),
                 thrX.partition_fragment_B(tDS.tensor()(_, _, 0)), acc);
      commitAndWait(acc);
      float* dg = dgOut + tok0 * rowK + int64_t(h) * DK;
      forEachPair<typename G::MmaXS>(cX, [&](int i, int s, int c) {
        const float2 f = exp2f2(sub2(b2(C - 1, c), b2(s, c)));
        acc(i) *= f.x;
        acc(i + 1) *= f.y;
        if (wantDg && s < rows) {  // k dk_inter, read back in phase 3
          const float2 kk = unpack2<T>(lds32(tK.at(s, c)));
          *reinterpret_cast<float2*>(dg + s * rowK + c) = make_float2(kk.x * acc(i), kk.y * acc(i + 1));
        }
      });
    }
    fenceToAsyncProxy();
    ctaBarrier();
    fillDecays();
    {
      typename G::MmaDtQ mma;
      auto thr = mma.get_thread_slice(wtid);
      const auto fA = thr.partition_fragment_A(tDt.tensor()(_, _, 0));
      const auto fB = thr.partition_fragment_B(tQst.tensor()(_, _, 0));
      Tensor tmp = partition_fragment_C(mmaXS, Shape<Int<C>, Int<DK>>{});
#pragma unroll 1
      for (int half = 0; half < (kLowHalves ? 2 : 1); ++half) {  // Qs's high halves, then its low halves
        if (half == 1) lowHalves(tQs, qsPair);
#pragma unroll 1
        for (int i = 1; i <= kDiagRefs; ++i) {  // t in block i: rows s in earlier blocks
          issue(tmp);
          mma.accumulate_ = GMMA::ScaleOut::Zero;
          cute::gemm(mma, fA(_, _, i), fB(_, _, i), tmp);
          commitAndWait(tmp);
          forEachPair<typename G::MmaXS>(cX, [&](int r, int s, int c) {
            if (s < NB * i) {
              const float2 f = exp2f2(sub2(ref2(i - 1, c), b2(s, c)));
              acc(r) += f.x * tmp(r);
              acc(r + 1) += f.y * tmp(r + 1);
            }
          });
        }
      }
      // diagonal block by decay chains: t walks up the block while f carries e^{bq_t - b_s} per
      // (row s, channel): 1 at t = s (s + 1 exclusive), times e^{g_t} (e^{g_{t-1}} exclusive) a
      // step after it, 0 before.
      chainsBarrier();
      CUTE_UNROLL
      for (int part = 0; part < kAccRegs; part += kChainRegs) {
        float f[kChainRegs];
        CUTE_UNROLL
        for (int j = 0; j < kChainRegs; ++j) f[j] = 0.f;
#pragma unroll 1
        for (int t = blk0; t < blk0 + NB; ++t) {
          const int lead = excl ? 1 : 0;  // row s's chain starts at t = s + lead
          const float2 d = make_float2(unpack1<T>(lds16(tD.at(t, accRow))), unpack1<T>(lds16(tD.at(t, accRow + 8))));
          const float2 e = make_float2(t == accRow + lead ? 1.f : 0.f, t == accRow + 8 + lead ? 1.f : 0.f);
          // e^{g_t} (exclusive e^{g_{t-1}}; at t = 0 any row will do: f is 0 or restarts there)
          chainStep<T>(acc, f, part, cX, accRow, decay + (excl ? (t > 0 ? t - 1 : 0) : t) * DK, tQ, t, d, e);
        }
      }
    }
    ctaBarrier();
    {
      T* dk = static_cast<T*>(p.dk) + tok0 * rowK + int64_t(h) * DK;
      float* dkPart = kValueBlocks && p.dk_part ? p.dk_part + partOffset + tok0 * rowK + int64_t(h) * DK : nullptr;
      forEachPair<typename G::MmaXS>(cX, [&](int i, int s, int c) {
        const float2 kk = unpack2<T>(lds32(tK.at(s, c)));
        if (wantDg)  // k dk; phase 4 subtracts k dk_inter
          *reinterpret_cast<float2*>(&stK[bIndex<DK>(s, c)]) = make_float2(kk.x * acc(i), kk.y * acc(i + 1));
        float x0 = acc(i), x1 = acc(i + 1);
        if (excl) {
          const float2 qq = unpack2<T>(lds32(tQ.at(s, c)));
          x0 += sm.ddiag[s] * u[c] * qq.x;
          x1 += sm.ddiag[s] * u[c + 1] * qq.y;
        }
        if (s >= rows) return;
        if constexpr (kValueBlocks) {
          if (dkPart) *reinterpret_cast<float2*>(dkPart + s * rowK + c) = make_float2(x0, x1);
        } else if (p.dk) {
          *reinterpret_cast<uint32_t*>(dk + s * rowK + c) = pack2<T>(x0, x1);
        }
      });
    }
  } else {
    typename G::MmaKdS mmaKdS;
    const auto cV = accCoords<C, DV>(mmaKdS);
    {
        // A^T[s][t in blk i] = scale (Kr_i Qs^T)[s][t] for s < 16 i
      typename G::MmaQK mma;
      auto thr = mma.get_thread_slice(wtid);
      Tensor accA = partition_fragment_C(mma, Shape<Int<C>, Int<C>>{});
      const auto cA = accCoords<C, C>(mma);
      for (int i = 1; i <= kDiagRefs; ++i) {
        warpgroupBarrier(wg);  // the previous product has read x
        forEachTilePair<C, DK, kWarpgroupThreads>(
            wtid,
            [&](int s, int c) {
              uint32_t w = 0;
              if (s < NB * i) {
                const float2 kk = unpack2<T>(lds32(tK.at(s, c))), f = exp2f2(sub2(ref2(i - 1, c), b2(s, c)));
                w = pack2<T>(kk.x * f.x, kk.y * f.y);
              }
              return w;
            },
            [&](int s, int c, uint32_t w) { sts32(tX.at(s, c), w); });
        fenceToAsyncProxy();
        warpgroupBarrier(wg);
        issue(accA);
        gemm<true>(mma, thr.partition_fragment_A(tX.tensor()(_, _, 0)),
                   thr.partition_fragment_B(tQs.tensor()(_, _, 0)), accA);
        commitAndWait(accA);
        forEachPair<typename G::MmaQK>(cA, [&](int r, int s, int t) {
          if (s < NB * i && t / NB == i) sts32(tAt.at(s, t), pack2<T>(scale * accA(r), scale * accA(r + 1)));
        });
      }
    }
    fenceToAsyncProxy();
    ctaBarrier();
    {
      // x <- K e^{B - b}; dv = x dS, then dv += A^T dO
      forEachTilePair<C, DK, kWarpgroupThreads>(
          wtid,
          [&](int s, int c) {
            const float2 kk = unpack2<T>(lds32(tK.at(s, c))), f = exp2f2(sub2(b2(C - 1, c), b2(s, c)));
            return pack2<T>(kk.x * f.x, kk.y * f.y);
          },
          [&](int s, int c, uint32_t w) { sts32(tX.at(s, c), w); });
      fenceToAsyncProxy();
      warpgroupBarrier(wg);
      auto thrV = mmaKdS.get_thread_slice(wtid);
      Tensor accV = partition_fragment_C(mmaKdS, Shape<Int<C>, Int<DV>>{});  // dv
      issue(accV);
      gemm<true>(mmaKdS, thrV.partition_fragment_A(tX.tensor()(_, _, 0)),
                 thrV.partition_fragment_B(tDSt.tensor()(_, _, 0)), accV);
      commitAndWait(accV);
      typename Tiles::MmaAtO mma;
      auto thr = mma.get_thread_slice(wtid);
      issue(accV);
      gemm<false>(mma, thr.partition_fragment_A(tAt.tensor()(_, _, 0)),
                  thr.partition_fragment_B(tOt.tensor()(_, _, 0)), accV);
      commitAndWait(accV);
      if (p.dv) {
        T* dv = static_cast<T*>(p.dv) + tok0 * rowV + int64_t(h) * dvAll + v0;
        forEachPair<typename G::MmaKdS>(cV, [&](int i, int s, int c) {
          if (s < rows) *reinterpret_cast<uint32_t*>(dv + s * rowV + c) = pack2<T>(accV(i), accV(i + 1));
        });
      }
    }
    ctaBarrier();
    if (excl && p.du_part) {  // sum_t D[t][t] q_t k_t per channel
      for (int c = wtid; c < DK; c += kWarpgroupThreads) {
        float a = 0.f;
        for (int t = 0; t < rows; ++t) {
          const float2 qq = unpack2<T>(lds32(tQ.at(t, c & ~1))), kk = unpack2<T>(lds32(tK.at(t, c & ~1)));
          a += sm.ddiag[t] * ((c & 1) ? qq.y * kk.y : qq.x * kk.x);
        }
        p.du_part[(slot * H + h) * DK + c] = a;
      }
    }
  }
  if (!wantDg) return;
  __syncthreads();

  // ---- phase 4: dg_t = Z + sum_{t' >= t} (p - kin)_t' + sum_{s < t} E_s [- p_t], a thread per
  // channel, with kin = k dk - E and E = k dk_inter parked in dg's rows: an ascending pass turns
  // kin into p - kin and E into its exclusive prefix sums, a descending one adds the suffix sums
  // and Z.
  if (tid < DK) {
    const int c = tid;
    float* dg = dgOut + tok0 * rowK + int64_t(h) * DK + c;
    // dg's rows are read a block of NB tokens at a time, the block's loads issued together before
    // any of its stores (a load a token, after the previous token's store, would wait one L2 round
    // trip each: 2 C of them).
    float prefix = 0.f;
#pragma unroll 1
    for (int t0 = 0; t0 < C; t0 += NB) {
      float e[NB];
      CUTE_UNROLL
      for (int j = 0; j < NB; ++j) e[j] = t0 + j < rows ? dg[(t0 + j) * rowK] : 0.f;
      CUTE_UNROLL
      for (int j = 0; j < NB; ++j) {
        const int t = t0 + j;
        stK[bIndex<DK>(t, c)] = stP[bIndex<DK>(t, c)] - (stK[bIndex<DK>(t, c)] - e[j]);
        if (t < rows) dg[t * rowK] = prefix;
        prefix += e[j];
      }
    }
    const float z = expFtz(b(C - 1, c)) * sm.zdot[c];
    float suffix = 0.f;
#pragma unroll 1
    for (int t0 = C - NB; t0 >= 0; t0 -= NB) {
      float pre[NB];
      CUTE_UNROLL
      for (int j = 0; j < NB; ++j) pre[j] = t0 + j < rows ? dg[(t0 + j) * rowK] : 0.f;
      CUTE_UNROLL
      for (int j = NB - 1; j >= 0; --j) {
        const int t = t0 + j;
        suffix += stK[bIndex<DK>(t, c)];
        if (t < rows) {
          const float x = (z + suffix) + pre[j];
          dg[t * rowK] = excl ? x - stP[bIndex<DK>(t, c)] : x;
        }
      }
    }
  }
}

/// The stage over every chunk slot, head and value block (diag_grad_<dtype>.cu instantiate it):
/// `valueBlocks` blocks of DV columns; with more than one, p's part planes are set and their sums
/// are written to dq, dk and dg afterwards.
template <class T, int DK, int DV>
void runDiagGrad(const DiagGradParams& p, int64_t slots, int valueBlocks, cudaStream_t stream) {
  auto kernel = p.low_halves ? diagGradKernel<T, DK, DV, true, false> : diagGradKernel<T, DK, DV, false, false>;
  if constexpr (DV == 128) {  // value blocks (diag_grad_params.h) take the widest tile
    if (valueBlocks > 1)
      kernel = p.low_halves ? diagGradKernel<T, DK, DV, true, true> : diagGradKernel<T, DK, DV, false, true>;
  }
  LINAC_REQUIRE(valueBlocks == 1 || DV == 128, "hopper diagGrad: value blocks of 128 columns");
  constexpr size_t bytes = DiagGradTiles<T, DK, DV>::kSmemBytes;
  static_assert(bytes <= 227 * 1024, "one CTA per SM: an H100 / H200 SM offers 227 KiB");
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<dim3(unsigned(slots), p.heads, unsigned(valueBlocks)), kDiagGradThreads, bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("hopper::diagGradKernel");
  if (valueBlocks == 1) return;
  constexpr int kThreads = 256;
  const int64_t quads = p.part_plane / 4;
  const unsigned grid = unsigned(std::min<int64_t>((quads + kThreads - 1) / kThreads, 65535));
  diagSumValueBlocksKernel<T><<<grid, kThreads, 0, stream>>>(p, valueBlocks);
  LINAC_CUDA_CHECK_LAUNCH("hopper::diagSumValueBlocksKernel");
}

}  // namespace linac::kernels::cuda::hopper

// Used inside namespace linac::kernels::cuda::hopper.
#define LINAC_HOPPER_DIAG_GRAD_INSTANTIATE(T)                                              \
  template void runDiagGrad<T, 64, 64>(const DiagGradParams&, int64_t, int, cudaStream_t);     \
  template void runDiagGrad<T, 64, 128>(const DiagGradParams&, int64_t, int, cudaStream_t);    \
  template void runDiagGrad<T, 128, 64>(const DiagGradParams&, int64_t, int, cudaStream_t);    \
  template void runDiagGrad<T, 128, 128>(const DiagGradParams&, int64_t, int, cudaStream_t);
