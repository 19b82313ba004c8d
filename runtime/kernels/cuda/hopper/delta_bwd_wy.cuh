// Hopper backward of the delta rule, stage 5 (the WY backward): one CTA of two warpgroups per
// (chunk slot, head). From stage 1's X = (I + L)^-1, stage 3's dD, stage 4's dW, dk part and db
// part, with Tm = X diag(beta), G = strict_tril((K K^T) . Gam), L = diag(beta) G:
//   dTm = lower_incl(dW (K . exp(b))^T + dD V^T)                               warpgroup 0
//   dv  = Tm^T dD                                                  (final)     warpgroup 1
//   dL  = strict_lower(-X^T (dTm Tm^T)),  dM = dL . beta_t Gam                 warpgroup 0
//   dk  = dk_part + (Tm diag(exp b))^T dW + dM K + dM^T K          (final)     warpgroup 1
//   dbeta_s = sum_t dTm_ts X_ts + sum_s' dL_ss' G_ss'
//   db_t   += sum_s Tm_st (dW (K . exp(b))^T)_st + sum_s E_ts - sum_t' E_t't,  E = dL . L
//   dg_t    = Z + sum_{t' >= t} db_t'                                          (in double)
// (db's first added term is k_t . exp(b_t) (Tm^T dW)_t, taken as a column sum of a product
// warpgroup 0 holds anyway.) Tm enters as hi + lo, and dD as hi + lo (Tm^T dD three wgmma, dD V^T
// two): with either rounded to bf16 the host transcription measured dv at 3e-3 and dbeta at 8e-3
// (gate 5e-3). Tm in Y = dTm Tm^T is hi + lo too (two wgmma): rounded once it took the bf16 dg of
// about one draw in 400 past the gate at the lab's T130 dk64 dv64 g >= -5 case (to 1.4e-2; host
// transcription, 800 draws). dW, dTm, Y, X (in X^T Y) and dM enter in the input dtype; the
// elementwise sums read X as x + x_lo (its input-dtype value and the remainder) and G from
// registers.
//
// Sized for two CTAs a SM at dk, dv <= 128 (~100 KB of shared memory, 128 registers): each CTA
// is a chain of dependent products with a barrier after each, so the second CTA's work is what
// fills the first one's waits. To get there:
//   - X and dD (fp32) come through registers, split into their tiles by the threads that loaded
//     them (no fp32 staging buffers); dD by value blocks of VB = 64 columns, block j + 1 loaded
//     while block j's products run, v by cp.async one or two blocks ahead;
//   - the value blocks' tiles and the later dTm, Y, dM tiles share their bytes;
//   - every row and column sum is reduced from the accumulators (quad and warp shuffles, then
//     the four warps' partials in order), not by serial loops over shared memory;
//   - the phases split the chain between the warpgroups: 1 dTm (0) beside dv (1); 2 G (0) beside
//     Y = dTm Tm^T and Tm diag(exp b) split again into Tm's tiles (1); 3 dL, E, dM (0); 4 dk from
//     the dk part (read from global memory into its accumulator) and four products (1) beside the
//     sums (0). So dk's accumulator is live in phase 4 only and G's in phases 2-3.
// Key dims above 128 take one CTA a SM (dk's accumulator is 128 registers a thread at dk 256).
#pragma once

#include "delta_bwd_common.cuh"
#include "delta_bwd_grad.cuh"
#include "delta_bwd_params.h"

namespace linac::kernels::cuda::hopper {

constexpr int kDeltaWyThreads = 2 * kWarpgroupThreads;

template <class T, int DK, int DV>
struct DeltaBwdWyTiles {
  static constexpr int C = kChunk;
  static constexpr int VB = 64;                          // value columns per block of the loop
  static constexpr int kValueBlocks = DV / VB;
  static constexpr int kVStages = kValueBlocks > 1 ? 2 : 1;  // v tiles in flight
  static constexpr int kMinBlocks = DK <= 128 ? 2 : 1;   // CTAs a SM the registers are capped for
  static constexpr int kWarps = kWarpgroupThreads / 32;  // rows of the column sums' partials
  static_assert(DV % VB == 0, "value dims are whole blocks");
  using Kw = RowTile<T, C, DK>;             // k, dW: [t, d]
  using KwT = Transposed<Kw, C, DK>;        // (d, t)
  using Vb = RowTile<T, C, VB>;             // dD (hi, lo) of a value block: [t, v]
  using VbT = Transposed<Vb, C, VB>;        // (v, t)
  using Vs = RowTile<T, C, VB, kVStages>;   // v of a value block: [t, v]
  using Sq = RowTile<T, C, C>;              // Tm (hi, lo), X (hi, lo), dTm, Y, dM: [t, s]
  using SqT = Transposed<Sq, C, C>;         // (s, t)

  using MmaKK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;     // K K^T, dW K^T
  using MmaVV = WarpgroupMma<T, C, C, VB, GMMA::Major::K, GMMA::Major::K>;     // dD V^T
  using MmaSq = WarpgroupMma<T, C, C, C, GMMA::Major::K, GMMA::Major::K>;      // dTm Tm^T
  using MmaSqT = WarpgroupMma<T, C, C, C, GMMA::Major::MN, GMMA::Major::MN>;   // X^T Y
  using MmaTD = WarpgroupMma<T, C, VB, C, GMMA::Major::MN, GMMA::Major::MN>;   // Tm^T dD
  using MmaTW = WarpgroupMma<T, C, DK, C, GMMA::Major::MN, GMMA::Major::MN>;   // Tm^T dW, dM^T K
  using MmaMK = WarpgroupMma<T, C, DK, C, GMMA::Major::K, GMMA::Major::MN>;    // dM K

  struct ValueBlock {  // phase 1
    alignas(1024) T v[cosize_v<Vs>];
    alignas(1024) T ddHi[cosize_v<Vb>];
    alignas(1024) T ddLo[cosize_v<Vb>];
  };
  struct Chain {  // phases 2-4
    alignas(1024) T dtm[cosize_v<Sq>];
    alignas(1024) T y[cosize_v<Sq>];
    alignas(1024) T dm[cosize_v<Sq>];
  };
  struct Smem {
    alignas(1024) T k[cosize_v<Kw>];
    alignas(1024) T dw[cosize_v<Kw>];
    alignas(1024) T tmHi[cosize_v<Sq>];  // Tm, in phase 4 Tm diag(exp b)
    alignas(1024) T tmLo[cosize_v<Sq>];
    alignas(1024) T x[cosize_v<Sq>];
    alignas(1024) T xLo[cosize_v<Sq>];
    union {
      ValueBlock values;
      Chain chain;
    };
    DeltaChunkScalars cs;
    alignas(16) float dbetaCols[kWarps * C];   // sum_t dTm_ts X_ts, per warp of warpgroup 0
    alignas(16) float dwCols[kWarps * C];      // sum_t Tm_ts (dW (K . exp b)^T)_ts, per warp
    alignas(16) float eCols[kWarps * C];       // sum_a E_as, per warp
    float dlg[C];                  // sum_s dL_ts G_ts
    float eRows[C];                // sum_s E_ts
    float db[C];
    float dbPart[C * deltaGradKeyBlocks<DK>()];  // stage 4's db parts [t, key block]
    float zPart[deltaGradKeyBlocks<DK>()];
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DK, int DV, class Decay>
__global__ void __launch_bounds__(kDeltaWyThreads, (DeltaBwdWyTiles<T, DK, DV>::kMinBlocks))
    deltaBwdWyKernel(const DeltaBackwardParams p) {
  using Tiles = DeltaBwdWyTiles<T, DK, DV>;
  constexpr int C = Tiles::C, VB = Tiles::VB, kThreads = kDeltaWyThreads;
  constexpr int kValueBlocks = Tiles::kValueBlocks, kVStages = Tiles::kVStages, kWarps = Tiles::kWarps;
  constexpr int kGradKeyBlocks = deltaGradKeyBlocks<DK>();  // stage 4's parts of db and Z
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, wg = tid / kWarpgroupThreads, wtid = tid % kWarpgroupThreads;
  const int h = blockIdx.y, H = p.heads;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowK = int64_t(H) * DK, rowV = int64_t(H) * DV;
  const int64_t offK = tok0 * rowK + int64_t(h) * DK, offV = tok0 * rowV + int64_t(h) * DV;
  const bool wantDg = Decay::kClass == DecayClass::Scalar && p.dg != nullptr;

  const auto tK = smemTile(sm.k, typename Tiles::Kw{});
  const auto tKt = smemTile(sm.k, typename Tiles::KwT{});
  const auto tDw = smemTile(sm.dw, typename Tiles::Kw{});
  const auto tDwT = smemTile(sm.dw, typename Tiles::KwT{});
  const auto tV = smemTile(sm.values.v, typename Tiles::Vs{});  // (C, VB, stage)
  const auto tDdHi = smemTile(sm.values.ddHi, typename Tiles::Vb{});
  const auto tDdLo = smemTile(sm.values.ddLo, typename Tiles::Vb{});
  const auto tDdHiT = smemTile(sm.values.ddHi, typename Tiles::VbT{});
  const auto tDdLoT = smemTile(sm.values.ddLo, typename Tiles::VbT{});
  const auto tTmHi = smemTile(sm.tmHi, typename Tiles::Sq{});
  const auto tTmLo = smemTile(sm.tmLo, typename Tiles::Sq{});
  const auto tTmHiT = smemTile(sm.tmHi, typename Tiles::SqT{});
  const auto tTmLoT = smemTile(sm.tmLo, typename Tiles::SqT{});
  const auto tX = smemTile(sm.x, typename Tiles::Sq{});
  const auto tXT = smemTile(sm.x, typename Tiles::SqT{});
  const auto tXLo = smemTile(sm.xLo, typename Tiles::Sq{});
  const auto tDtm = smemTile(sm.chain.dtm, typename Tiles::Sq{});
  const auto tY = smemTile(sm.chain.y, typename Tiles::Sq{});
  const auto tYT = smemTile(sm.chain.y, typename Tiles::SqT{});
  const auto tDm = smemTile(sm.chain.dm, typename Tiles::Sq{});
  const auto tDmT = smemTile(sm.chain.dm, typename Tiles::SqT{});
  // X at (t, s) in fp32, from its two input-dtype parts
  auto xAt = [&](int t, int s) {
    const float2 a = unpack2<T>(lds32(tX.at(t, s))), b = unpack2<T>(lds32(tXLo.at(t, s)));
    return make_float2(a.x + b.x, a.y + b.y);
  };

  // Phase 0. Copies: g (its own group, for the cumsum), then k, dW, the first value blocks' v
  // and stage 4's db and Z parts; X and dD's first block into registers meanwhile.
  stageDeltaScalars<Decay>(sm.cs, p.g, p.beta, tok0, rows, h, H);
  copyCommit();
  loadTile<false, C, DK, kThreads>(tK, 0, static_cast<const T*>(p.k) + offK, rowK, rows);
  loadTile<false, C, DK, kThreads>(tDw, 0, static_cast<const T*>(p.dw) + offK, rowK, rows);
  CUTE_UNROLL
  for (int j = 0; j < kVStages; ++j)
    loadTile<false, C, VB, kThreads>(tV, j, static_cast<const T*>(p.v) + offV + j * VB, rowV, rows);
  if (wantDg) {
    for (int i = tid; i < C * kGradKeyBlocks; i += kThreads) {
      const int t = i / kGradKeyBlocks;
      copy4(static_cast<uint32_t>(__cvta_generic_to_shared(&sm.dbPart[i])),
            p.dbpart + (t < rows ? (tok0 + t) * H * kGradKeyBlocks + int64_t(h) * kGradKeyBlocks + i % kGradKeyBlocks : 0),
            t < rows);
    }
    if (tid < kGradKeyBlocks)
      copy4(static_cast<uint32_t>(__cvta_generic_to_shared(&sm.zPart[tid])),
            p.zpart + (int64_t(blockIdx.x) * H + h) * kGradKeyBlocks + tid, true);
  }
  copyCommit();
  Fp32Rows<C, C, kThreads> xRows;
  xRows.load(p.x + (int64_t(blockIdx.x) * H + h) * (C * C), C, C, tid);
  Fp32Rows<C, VB, kThreads> dd;
  dd.load(p.dd + offV, rowV, rows, tid);
  copyWait<1>();
  __syncthreads();  // g, beta
  if (tid < 32) chunkCumsumDouble<Decay>(sm.cs.b, sm.cs.g);
  xRows.forEach(tid, [&](int t, int s, const float4& x) {  // Tm = X diag(beta) (hi, lo); X (hi, lo)
    const float* bt = &sm.cs.beta[s];
    storeSplit4<T>(tTmHi, tTmLo, t, s, make_float4(x.x * bt[0], x.y * bt[1], x.z * bt[2], x.w * bt[3]));
    storeSplit4<T>(tX, tXLo, t, s, x);
  });
  dd.template splitInto<T>(tDdHi, tDdLo, tid);
  copyWait<0>();
  fenceToAsyncProxy();
  __syncthreads();  // b, every tile

  using MmaKK = typename Tiles::MmaKK;
  MmaKK mmaKK;
  Tensor accT = partition_fragment_C(mmaKK, Shape<Int<C>, Int<C>>{});  // dTm, then dL (wg 0)
  const auto cC = accCoords<C, C>(mmaKK);
  const float* bt = sm.cs.beta;

  // Phase 1: dTm = lower_incl(dW (K . exp b)^T + sum_j dD_j V_j^T) (0), with the column sums of
  // Tm . dW (K . exp b)^T for db; dv_j = Tm^T dD_j per value block (1).
  if (wg == 0) {
    auto thr = mmaKK.get_thread_slice(wtid);
    issue(accT);
    gemm<true>(mmaKK, thr.partition_fragment_A(tDw.tensor()(_, _, 0)),
               thr.partition_fragment_B(tK.tensor()(_, _, 0)), accT);
    commitAndWait(accT);
    forEachPair<MmaKK>(cC, [&](int i, int t, int s) {
      accT(i) *= decayFrom<Decay>(sm.cs.b, s);
      accT(i + 1) *= decayFrom<Decay>(sm.cs.b, s + 1);
    });
    if (wantDg)
      warpColumnSums<MmaKK, C>(cC, [&](int i, int t, int s) {
        const float tm = unpack1<T>(lds16(tTmHi.at(t, s))) + unpack1<T>(lds16(tTmLo.at(t, s)));
        return tm * accT(i);
      }, sm.dwCols, C);
  }
  for (int j = 0; j < kValueBlocks; ++j) {  // block j's tiles are in place
    Fp32Rows<C, VB, kThreads> next;  // dD's block j + 1, in flight during block j's products
    if (j + 1 < kValueBlocks) next.load(p.dd + offV + (j + 1) * VB, rowV, rows, tid);
    if (wg == 0) {
      typename Tiles::MmaVV mmaVV;
      auto thrV = mmaVV.get_thread_slice(wtid);
      Tensor fV = thrV.partition_fragment_B(tV.tensor()(_, _, j % kVStages));
      issue(accT);
      gemm<false>(mmaVV, thrV.partition_fragment_A(tDdHi.tensor()(_, _, 0)), fV, accT);
      gemm<false>(mmaVV, thrV.partition_fragment_A(tDdLo.tensor()(_, _, 0)), fV, accT);
      commitAndWait(accT);
    } else {
      typename Tiles::MmaTD mmaTD;
      auto thr = mmaTD.get_thread_slice(wtid);
      Tensor accV = partition_fragment_C(mmaTD, Shape<Int<C>, Int<VB>>{});
      Tensor fHi = thr.partition_fragment_A(tTmHiT.tensor()(_, _, 0));
      Tensor fDdHi = thr.partition_fragment_B(tDdHiT.tensor()(_, _, 0));
      issue(accV);
      gemm<true>(mmaTD, fHi, fDdHi, accV);
      gemm<false>(mmaTD, thr.partition_fragment_A(tTmLoT.tensor()(_, _, 0)), fDdHi, accV);
      gemm<false>(mmaTD, fHi, thr.partition_fragment_B(tDdLoT.tensor()(_, _, 0)), accV);
      commitAndWait(accV);
      if (p.dv) {
        T* dv = static_cast<T*>(p.dv) + offV + j * VB;
        forEachPair<typename Tiles::MmaTD>(accCoords<C, VB>(mmaTD), [&](int i, int s, int c) {
          if (s < rows) *reinterpret_cast<uint32_t*>(dv + s * rowV + c) = pack2<T>(accV(i), accV(i + 1));
        });
      }
    }
    __syncthreads();  // block j's tiles read (after the last block, their bytes go to dTm, Y, dM)
    if (j + 1 < kValueBlocks) {
      next.template splitInto<T>(tDdHi, tDdLo, tid);
      if (j + kVStages < kValueBlocks) {  // v's stage of block j takes block j + kVStages
        loadTile<false, C, VB, kThreads>(tV, j % kVStages,
                                         static_cast<const T*>(p.v) + offV + (j + kVStages) * VB, rowV, rows);
        copyCommit();
        copyWait<1>();
      } else {
        copyWait<0>();
      }
      fenceToAsyncProxy();
      __syncthreads();  // block j + 1's tiles
    }
  }
  if (wg == 0) {  // dTm in the input dtype; the column sums of dTm . X for dbeta
    forEachPair<MmaKK>(cC, [&](int i, int t, int s) {
      accT(i) = s <= t ? accT(i) : 0.f;
      accT(i + 1) = s + 1 <= t ? accT(i + 1) : 0.f;
      sts32(tDtm.at(t, s), pack2<T>(accT(i), accT(i + 1)));
    });
    if (p.dbeta)
      warpColumnSums<MmaKK, C>(cC, [&](int i, int t, int s) {
        const float x = unpack1<T>(lds16(tX.at(t, s))) + unpack1<T>(lds16(tXLo.at(t, s)));
        return accT(i) * x;
      }, sm.dbetaCols, C);
  }
  fenceToAsyncProxy();
  __syncthreads();  // dTm

  // Phase 2: G (0); Y = dTm Tm^T, then Tm diag(exp b) in Tm's tiles (1).
  Tensor accG = partition_fragment_C(mmaKK, Shape<Int<C>, Int<C>>{});  // G (wg 0)
  if (wg == 0) {
    auto thr = mmaKK.get_thread_slice(wtid);
    issue(accG);
    gemm<true>(mmaKK, thr.partition_fragment_A(tK.tensor()(_, _, 0)),
               thr.partition_fragment_B(tK.tensor()(_, _, 0)), accG);
    commitAndWait(accG);
    forEachPair<MmaKK>(cC, [&](int i, int t, int s) {
      accG(i) = s < t ? accG(i) * decayRatio<Decay>(sm.cs.b, t, s) : 0.f;
      accG(i + 1) = s + 1 < t ? accG(i + 1) * decayRatio<Decay>(sm.cs.b, t, s + 1) : 0.f;
    });
  } else {
    typename Tiles::MmaSq mma;
    auto thr = mma.get_thread_slice(wtid);
    Tensor acc = partition_fragment_C(mma, Shape<Int<C>, Int<C>>{});
    issue(acc);
    Tensor fDtm = thr.partition_fragment_A(tDtm.tensor()(_, _, 0));
    gemm<true>(mma, fDtm, thr.partition_fragment_B(tTmHi.tensor()(_, _, 0)), acc);
    gemm<false>(mma, fDtm, thr.partition_fragment_B(tTmLo.tensor()(_, _, 0)), acc);
    commitAndWait(acc);
    forEachPair<typename Tiles::MmaSq>(cC, [&](int i, int t, int u) {
      sts32(tY.at(t, u), pack2<T>(acc(i), acc(i + 1)));
    });
    if constexpr (Decay::kActive) {  // Tm diag(exp b) for phase 4's Tm^T dW (Tm's last reader done)
      for (int i = wtid; i < C * C / 4; i += kWarpgroupThreads) {
        const int t = i / (C / 4), s = (i % (C / 4)) * 4;
        CUTE_UNROLL
        for (int c = s; c < s + 4; c += 2) {
          const float2 x = xAt(t, c);
          uint32_t hi, lo;
          splitPack2<T>(x.x * bt[c] * decayFrom<Decay>(sm.cs.b, c),
                        x.y * bt[c + 1] * decayFrom<Decay>(sm.cs.b, c + 1), hi, lo);
          sts32(tTmHi.at(t, c), hi);
          sts32(tTmLo.at(t, c), lo);
        }
      }
    }
  }
  fenceToAsyncProxy();
  __syncthreads();  // G, Y, Tm diag(exp b)

  // Phase 3: dL = -X^T Y (strict lower); dL's row sums with G, E's row and column sums, dM (0).
  if (wg == 0) {
    typename Tiles::MmaSqT mma;
    auto thr = mma.get_thread_slice(wtid);
    issue(accT);
    gemm<true>(mma, thr.partition_fragment_A(tXT.tensor()(_, _, 0)),
               thr.partition_fragment_B(tYT.tensor()(_, _, 0)), accT);
    commitAndWait(accT);
    const int r0 = get<0>(cC(0));
    float g0 = 0.f, g1 = 0.f, e0 = 0.f, e1 = 0.f;  // rows r0, r0 + 8: sum_u dL G, sum_u E
    forEachPair<MmaKK>(cC, [&](int i, int a, int u) {
      accT(i) = u < a ? -accT(i) : 0.f;  // dL
      accT(i + 1) = u + 1 < a ? -accT(i + 1) : 0.f;
      const float lg = accT(i) * accG(i) + accT(i + 1) * accG(i + 1);
      const float ba = bt[a];
      if (a == r0) {
        g0 += lg;
        e0 += ba * lg;
      } else {
        g1 += lg;
        e1 += ba * lg;
      }
      sts32(tDm.at(a, u), pack2<T>(accT(i) * ba * decayRatio<Decay>(sm.cs.b, a, u),
                                   accT(i + 1) * ba * decayRatio<Decay>(sm.cs.b, a, u + 1)));
    });
    g0 = quadRowSum(g0);
    g1 = quadRowSum(g1);
    e0 = quadRowSum(e0);
    e1 = quadRowSum(e1);
    if ((wtid & 3) == 0) {
      sm.dlg[r0] = g0;
      sm.dlg[r0 + 8] = g1;
      sm.eRows[r0] = e0;
      sm.eRows[r0 + 8] = e1;
    }
    if (wantDg)
      warpColumnSums<MmaKK, C>(cC, [&](int i, int a, int) { return accT(i) * bt[a] * accG(i); },
                               sm.eCols, C);
  }
  fenceToAsyncProxy();
  __syncthreads();  // dM, the sums

  // Phase 4: dk (1); dbeta and db, then dg (0).
  if (wg == 1) {
    if (p.dk) {  // dk = the dk part + (Tm diag(exp b))^T dW + dM K + dM^T K
      using MmaTW = typename Tiles::MmaTW;
      MmaTW mmaTW;
      Tensor accK = partition_fragment_C(mmaTW, Shape<Int<C>, Int<DK>>{});
      const float* part = p.dkpart + offK;
      forEachPair<MmaTW>(accCoords<C, DK>(mmaTW), [&](int i, int s, int d) {
        const float2 a = s < rows ? __ldg(reinterpret_cast<const float2*>(part + s * rowK + d))
                                  : make_float2(0.f, 0.f);
        accK(i) = a.x;
        accK(i + 1) = a.y;
      });
      typename Tiles::MmaMK mmaMK;
      auto thr = mmaMK.get_thread_slice(wtid);
      auto thrT = mmaTW.get_thread_slice(wtid);
      Tensor fDwT = thrT.partition_fragment_B(tDwT.tensor()(_, _, 0));
      Tensor fKt = thrT.partition_fragment_B(tKt.tensor()(_, _, 0));
      issue(accK);
      gemm<false>(mmaTW, thrT.partition_fragment_A(tTmHiT.tensor()(_, _, 0)), fDwT, accK);
      gemm<false>(mmaTW, thrT.partition_fragment_A(tTmLoT.tensor()(_, _, 0)), fDwT, accK);
      gemm<false>(mmaMK, thr.partition_fragment_A(tDm.tensor()(_, _, 0)),
                  thr.partition_fragment_B(tKt.tensor()(_, _, 0)), accK);
      gemm<false>(mmaTW, thrT.partition_fragment_A(tDmT.tensor()(_, _, 0)), fKt, accK);
      commitAndWait(accK);
      T* dk = static_cast<T*>(p.dk) + offK;
      forEachPair<MmaTW>(accCoords<C, DK>(mmaTW), [&](int i, int s, int d) {
        if (s < rows) *reinterpret_cast<uint32_t*>(dk + s * rowK + d) = pack2<T>(accK(i), accK(i + 1));
      });
    }
    return;
  }
  if (wtid >= C) return;
  const int t = wtid;
  auto warpSum = [&](const float* cols) {  // the column sums' partials, in warp order
    float s = 0.f;
    CUTE_UNROLL
    for (int w = 0; w < kWarps; ++w) s += cols[w * C + t];
    return s;
  };
  if (p.dbeta && t < rows) p.dbeta[(tok0 + t) * H + h] = warpSum(sm.dbetaCols) + sm.dlg[t];
  if (!wantDg) return;
  {  // db_t: stage 4's parts (key blocks in order), Tm . dW (K . exp b)^T's column, E's row minus
     // its column
    float part = 0.f;
    for (int kb = 0; kb < kGradKeyBlocks; ++kb) part += sm.dbPart[t * kGradKeyBlocks + kb];
    sm.db[t] = warpSum(sm.dwCols) + part + (sm.eRows[t] - warpSum(sm.eCols));
  }
  asm volatile("bar.sync 1, %0;\n" ::"n"(C) : "memory");  // warps 0-1: every db_t
  if (tid < 32) {  // dg_t = Z + sum_{t' >= t} db_t': a suffix scan in double, lane l owns 2l, 2l + 1
    const int lane = tid, t0 = 2 * lane;
    const double d0 = sm.db[t0], d1 = sm.db[t0 + 1];
    double suffix = d0 + d1;  // becomes the sum over lanes >= lane, in a fixed order
    CUTE_UNROLL
    for (int o = 1; o < 32; o <<= 1) {
      const double x = __shfl_down_sync(0xffffffffu, suffix, o);
      if (lane + o < 32) suffix += x;
    }
    double z = 0.0;  // Z, summed over stage 4's key blocks in order
    for (int kb = 0; kb < kGradKeyBlocks; ++kb) z += sm.zPart[kb];
    if (t0 < rows) p.dg[(tok0 + t0) * H + h] = float(z + suffix);
    if (t0 + 1 < rows) p.dg[(tok0 + t0 + 1) * H + h] = float(z + (suffix - d0));
  }
}

}  // namespace linac::kernels::cuda::hopper
