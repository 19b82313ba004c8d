// Hopper backward of the delta rule, stage 5 (the WY backward): one CTA of two warpgroups per
// (chunk slot, head). From stage 1's X = (I + L)^-1, stage 3's dD, stage 4's dW, dk part and db
// part, with Tm = X diag(beta), G = strict_tril((K K^T) . Gam), L = diag(beta) G:
//   dTm = lower_incl(dW (K . exp(b))^T + dD V^T)                               warpgroup 0
//   dv  = Tm^T dD                                                  (final)     warpgroup 1
//   dL  = strict_lower(-X^T (dTm Tm^T)),  dM = dL . beta_t Gam                 warpgroup 0
//   dk  = dk_part + diag(exp b) Tm^T dW + dM K + dM^T K            (final)     warpgroup 1
//   dbeta_s = sum_t dTm_ts X_ts + sum_s' dL_ss' G_ss'                          (fixed-order sums)
//   db_t   += k_t . exp(b_t) (Tm^T dW)_t + sum_s E_ts - sum_t' E_t't,  E = dL . L
//   dg_t    = Z + sum_{t' >= t} db_t'                                          (in double)
// Tm enters as hi + lo, and dD as hi + lo (Tm^T dD three wgmma, dD V^T two): with either rounded
// to bf16 the host transcription measured dv at 3e-3 and dbeta at 8e-3 (gate 5e-3). dW, dTm, Y,
// X (in X^T Y) and dM enter in the input dtype; the elementwise sums read X and G in fp32.
// Every global input arrives by cp.async with all copies in flight at once (dD and X through an
// fp32 staging buffer, then split in shared memory); stage 4's dk part is copied into that buffer
// once the last value block is split (while phases 2-3 run, and phase 1 with one value block),
// so phase 4 reads it from shared memory.
// Value dims above 128 stream through in blocks of VB = 64 columns (dv 512 whole would take 256
// accumulator registers a thread and ~400 KB of tiles): block j + 1's dD and V are copied while
// block j's products run (dD V^T accumulates over the blocks, dv is written per block). Key dims
// above 128 read the dk part in column blocks of 128 through the same staging buffer. At dk, dv
// <= 128 both loops run once over the whole extent.
#pragma once

#include "delta_bwd_common.cuh"
#include "delta_bwd_grad.cuh"
#include "delta_bwd_params.h"

namespace linac::kernels::cuda::hopper {

constexpr int kDeltaWyThreads = 2 * kWarpgroupThreads;

template <class T, int DK, int DV>
struct DeltaBwdWyTiles {
  static constexpr int C = kChunk;
  static constexpr int VB = DV <= 128 ? DV : 64;        // value columns per block of the loop
  static constexpr int kValueBlocks = DV / VB;
  static constexpr int kVStages = kValueBlocks > 1 ? 2 : 1;  // v tiles: this block and the next
  static constexpr int KS = DK <= 128 ? DK : 128;       // dk part columns staged at once
  static constexpr int kKeyBlocks = DK / KS;
  using Kw = RowTile<T, C, DK>;             // k, dW: [t, d]
  using KwT = Transposed<Kw, C, DK>;        // (d, t)
  using Vb = RowTile<T, C, VB>;             // dD (hi, lo) of a value block: [t, v]
  using VbT = Transposed<Vb, C, VB>;        // (v, t)
  using Vs = RowTile<T, C, VB, kVStages>;   // v of a value block: [t, v]
  using Sq = RowTile<T, C, C>;              // Tm (hi, lo), X, dTm, Y, dM: [t, s]
  using SqT = Transposed<Sq, C, C>;         // (s, t)

  using MmaKK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;     // K K^T, dW K^T
  using MmaVV = WarpgroupMma<T, C, C, VB, GMMA::Major::K, GMMA::Major::K>;     // dD V^T
  using MmaSq = WarpgroupMma<T, C, C, C, GMMA::Major::K, GMMA::Major::K>;      // dTm Tm^T
  using MmaSqT = WarpgroupMma<T, C, C, C, GMMA::Major::MN, GMMA::Major::MN>;   // X^T Y
  using MmaTD = WarpgroupMma<T, C, VB, C, GMMA::Major::MN, GMMA::Major::MN>;   // Tm^T dD
  using MmaTW = WarpgroupMma<T, C, DK, C, GMMA::Major::MN, GMMA::Major::MN>;   // Tm^T dW, dM^T K
  using MmaMK = WarpgroupMma<T, C, DK, C, GMMA::Major::K, GMMA::Major::MN>;    // dM K

  static constexpr int kLd = C + 4;  // fp32 [C, C] rows in shared memory
  // fp32 staging rows (a value block of dD, then a key block of the dk part): 8 floats of padding
  // put the rows a quad reads in phase 4 (8 bytes a lane, 4 rows a half-warp) on distinct banks.
  static constexpr int kLdStage = (KS > VB ? KS : VB) + 8;
  struct Smem {
    alignas(1024) T k[cosize_v<Kw>];
    alignas(1024) T dw[cosize_v<Kw>];
    alignas(1024) T v[cosize_v<Vs>];
    alignas(1024) T ddHi[cosize_v<Vb>];
    alignas(1024) T ddLo[cosize_v<Vb>];
    alignas(1024) T tmHi[cosize_v<Sq>];
    alignas(1024) T tmLo[cosize_v<Sq>];
    alignas(1024) T x[cosize_v<Sq>];
    alignas(1024) T dtm[cosize_v<Sq>];
    alignas(1024) T y[cosize_v<Sq>];
    alignas(1024) T dm[cosize_v<Sq>];
    alignas(16) float xf[C * kLd];   // X in fp32
    alignas(16) float scr[C * kLd];  // dTm . X, then E
    alignas(16) float stage[C * kLdStage];  // a value block of dD, then a key block of the dk part
    DeltaChunkScalars cs;
    float dbeta[C];  // sum_t dTm_ts X_ts (columns)
    float dlg[C];    // sum_s dL_ts G_ts (rows)
    float db[C];     // k_t . exp(b_t) (Tm^T dW)_t, then db_t
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DK, int DV, class Decay>
__global__ void __launch_bounds__(kDeltaWyThreads, 1) deltaBwdWyKernel(const DeltaBackwardParams p) {
  using Tiles = DeltaBwdWyTiles<T, DK, DV>;
  constexpr int C = Tiles::C, kThreads = kDeltaWyThreads, kLd = Tiles::kLd;
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
  const auto tV = smemTile(sm.v, typename Tiles::Vs{});        // (C, VB, stage)
  const auto tDdHi = smemTile(sm.ddHi, typename Tiles::Vb{});
  const auto tDdLo = smemTile(sm.ddLo, typename Tiles::Vb{});
  const auto tDdHiT = smemTile(sm.ddHi, typename Tiles::VbT{});
  const auto tDdLoT = smemTile(sm.ddLo, typename Tiles::VbT{});
  const auto tTmHi = smemTile(sm.tmHi, typename Tiles::Sq{});
  const auto tTmLo = smemTile(sm.tmLo, typename Tiles::Sq{});
  const auto tTmHiT = smemTile(sm.tmHi, typename Tiles::SqT{});
  const auto tTmLoT = smemTile(sm.tmLo, typename Tiles::SqT{});
  const auto tX = smemTile(sm.x, typename Tiles::Sq{});
  const auto tXT = smemTile(sm.x, typename Tiles::SqT{});
  const auto tDtm = smemTile(sm.dtm, typename Tiles::Sq{});
  const auto tY = smemTile(sm.y, typename Tiles::Sq{});
  const auto tYT = smemTile(sm.y, typename Tiles::SqT{});
  const auto tDm = smemTile(sm.dm, typename Tiles::Sq{});
  const auto tDmT = smemTile(sm.dm, typename Tiles::SqT{});

  constexpr int kLdStage = Tiles::kLdStage, VB = Tiles::VB, KS = Tiles::KS;
  constexpr int kValueBlocks = Tiles::kValueBlocks, kVStages = Tiles::kVStages;
  // Copies of value block j: v into its tile stage, dD (fp32) into the staging buffer.
  auto stageValueBlock = [&](int j) {
    loadTile<false, C, VB, kThreads>(tV, j % kVStages, static_cast<const T*>(p.v) + offV + j * VB,
                                     rowV, rows);
    stageRowsAsync<C, VB, kLdStage, kThreads>(sm.stage, p.dd + offV + j * VB, rowV, rows, tid);
  };
  auto stageDkPart = [&](int kb) {  // stage 4's dk part, columns [kb KS, (kb + 1) KS)
    stageRowsAsync<C, KS, kLdStage, kThreads>(sm.stage, p.dkpart + offK + kb * KS, rowK, rows, tid);
  };
  loadTile<false, C, DK, kThreads>(tK, 0, static_cast<const T*>(p.k) + offK, rowK, rows);
  loadTile<false, C, DK, kThreads>(tDw, 0, static_cast<const T*>(p.dw) + offK, rowK, rows);
  stageDeltaScalars<Decay>(sm.cs, p.g, p.beta, tok0, rows, h, H);
  stageValueBlock(0);
  stageRowsAsync<C, C, kLd, kThreads>(sm.xf, p.x + (int64_t(blockIdx.x) * H + h) * (C * C), C, C, tid);
  copyCommit();
  copyWait<0>();
  __syncthreads();  // every copy, beta
  if (tid < 32) chunkCumsumDouble<Decay>(sm.cs.b, sm.cs.g);
  splitStagedRows<C, VB, kLdStage, kThreads, true>(tDdHi, tDdLo, sm.stage, tid);
  {  // Tm = X diag(beta) as hi + lo, X in the input dtype
    for (int i = tid; i < C * C / 4; i += kThreads) {
      const int t = i / (C / 4), s = (i % (C / 4)) * 4;
      const float4 x = *reinterpret_cast<const float4*>(&sm.xf[t * kLd + s]);
      uint32_t h0, l0, h1, l1;
      splitPack2<T>(x.x * sm.cs.beta[s], x.y * sm.cs.beta[s + 1], h0, l0);
      splitPack2<T>(x.z * sm.cs.beta[s + 2], x.w * sm.cs.beta[s + 3], h1, l1);
      sts32(tTmHi.at(t, s), h0);
      sts32(tTmHi.at(t, s + 2), h1);
      sts32(tTmLo.at(t, s), l0);
      sts32(tTmLo.at(t, s + 2), l1);
      sts32(tX.at(t, s), pack2<T>(x.x, x.y));
      sts32(tX.at(t, s + 2), pack2<T>(x.z, x.w));
    }
  }
  fenceToAsyncProxy();
  __syncthreads();  // b, every tile; the staging buffer read
  if (kValueBlocks > 1) stageValueBlock(1);
  else if (p.dk) stageDkPart(0);  // read in phase 4
  copyCommit();

  using MmaKK = typename Tiles::MmaKK;
  using MmaTW = typename Tiles::MmaTW;
  MmaKK mmaKK;
  Tensor accG = partition_fragment_C(mmaKK, Shape<Int<C>, Int<C>>{});  // G (wg 0)
  Tensor accT = partition_fragment_C(mmaKK, Shape<Int<C>, Int<C>>{});  // dTm, then dL (wg 0)
  const auto cC = accCoords<C, C>(mmaKK);
  MmaTW mmaTW;
  Tensor accK = partition_fragment_C(mmaTW, Shape<Int<C>, Int<DK>>{});  // dk (wg 1)
  const auto cK = accCoords<C, DK>(mmaTW);
  const float* bt = sm.cs.beta;

  // Phase 1: G and dTm = lower_incl(dW (K . exp b)^T + sum_j dD_j V_j^T) (0); dv_j = Tm^T dD_j
  // per value block, then Tm^T dW and its row dots (1).
  if (wg == 0) {
    auto thr = mmaKK.get_thread_slice(wtid);
    Tensor fK = thr.partition_fragment_B(tK.tensor()(_, _, 0));
    issue(accG, accT);
    gemm<true>(mmaKK, thr.partition_fragment_A(tK.tensor()(_, _, 0)), fK, accG);
    gemm<true>(mmaKK, thr.partition_fragment_A(tDw.tensor()(_, _, 0)), fK, accT);
    commitAndWait(accG, accT);
    forEachPair<MmaKK>(cC, [&](int i, int t, int s) {
      accG(i) = s < t ? accG(i) * decayRatio<Decay>(sm.cs.b, t, s) : 0.f;
      accG(i + 1) = s + 1 < t ? accG(i + 1) * decayRatio<Decay>(sm.cs.b, t, s + 1) : 0.f;
      accT(i) *= decayFrom<Decay>(sm.cs.b, s);
      accT(i + 1) *= decayFrom<Decay>(sm.cs.b, s + 1);
    });
  }
  for (int j = 0; j < kValueBlocks; ++j) {  // the tiles of block j are in place
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
    if (j + 1 < kValueBlocks) {
      copyWait<0>();
      __syncthreads();  // block j's tiles read; block j + 1 landed
      splitStagedRows<C, VB, kLdStage, kThreads, true>(tDdHi, tDdLo, sm.stage, tid);
      fenceToAsyncProxy();
      __syncthreads();  // block j + 1's tiles; the staging buffer read
      if (j + 2 < kValueBlocks) stageValueBlock(j + 2);
      else if (p.dk) stageDkPart(0);
      copyCommit();
    }
  }
  if (wg == 0) {
    forEachPair<MmaKK>(cC, [&](int i, int t, int s) {
      const float d0 = s <= t ? accT(i) : 0.f, d1 = s + 1 <= t ? accT(i + 1) : 0.f;
      sts32(tDtm.at(t, s), pack2<T>(d0, d1));
      *reinterpret_cast<float2*>(&sm.scr[t * kLd + s]) =
          make_float2(d0 * sm.xf[t * kLd + s], d1 * sm.xf[t * kLd + s + 1]);
    });
  } else {
    auto thrW = mmaTW.get_thread_slice(wtid);
    Tensor fDwT = thrW.partition_fragment_B(tDwT.tensor()(_, _, 0));
    issue(accK);
    gemm<true>(mmaTW, thrW.partition_fragment_A(tTmHiT.tensor()(_, _, 0)), fDwT, accK);
    gemm<false>(mmaTW, thrW.partition_fragment_A(tTmLoT.tensor()(_, _, 0)), fDwT, accK);
    commitAndWait(accK);
    const int r0 = get<0>(cK(0));
    float s0 = 0.f, s1 = 0.f;  // k_s . exp(b_s) (Tm^T dW)_s for rows r0, r0 + 8
    forEachPair<MmaTW>(cK, [&](int i, int s, int d) {
      const float f = decayFrom<Decay>(sm.cs.b, s);
      accK(i) *= f;
      accK(i + 1) *= f;
      const float2 kk = unpack2<T>(lds32(tK.at(s, d)));
      const float part = accK(i) * kk.x + accK(i + 1) * kk.y;
      if (s == r0) s0 += part;
      else s1 += part;
    });
    s0 = quadRowSum(s0);
    s1 = quadRowSum(s1);
    if ((wtid & 3) == 0) {
      sm.db[r0] = s0;
      sm.db[r0 + 8] = s1;
    }
  }
  fenceToAsyncProxy();
  __syncthreads();  // dTm, dTm . X

  // Phase 2: Y = dTm Tm^T (0); column sums of dTm . X (1).
  if (wg == 0) {
    typename Tiles::MmaSq mma;
    auto thr = mma.get_thread_slice(wtid);
    Tensor acc = partition_fragment_C(mma, Shape<Int<C>, Int<C>>{});
    issue(acc);
    gemm<true>(mma, thr.partition_fragment_A(tDtm.tensor()(_, _, 0)),
               thr.partition_fragment_B(tTmHi.tensor()(_, _, 0)), acc);
    commitAndWait(acc);
    forEachPair<typename Tiles::MmaSq>(cC, [&](int i, int t, int u) {
      sts32(tY.at(t, u), pack2<T>(acc(i), acc(i + 1)));
    });
  } else if (wtid < C) {
    const int s = wtid;
    float a = 0.f;
    for (int t = s; t < C; ++t) a += sm.scr[t * kLd + s];
    sm.dbeta[s] = a;
  }
  fenceToAsyncProxy();
  __syncthreads();  // Y; scr free

  // Phase 3 (0): dL = -X^T Y (strict lower); dbeta rows, E, dM.
  if (wg == 0) {
    typename Tiles::MmaSqT mma;
    auto thr = mma.get_thread_slice(wtid);
    issue(accT);
    gemm<true>(mma, thr.partition_fragment_A(tXT.tensor()(_, _, 0)),
               thr.partition_fragment_B(tYT.tensor()(_, _, 0)), accT);
    commitAndWait(accT);
    const int r0 = get<0>(cC(0));
    float s0 = 0.f, s1 = 0.f;  // sum_u dL_au G_au for rows r0, r0 + 8
    forEachPair<MmaKK>(cC, [&](int i, int a, int u) {
      const float l0 = u < a ? -accT(i) : 0.f, l1 = u + 1 < a ? -accT(i + 1) : 0.f;
      const float part = l0 * accG(i) + l1 * accG(i + 1);
      if (a == r0) s0 += part;
      else s1 += part;
      const float ba = bt[a];
      *reinterpret_cast<float2*>(&sm.scr[a * kLd + u]) = make_float2(l0 * ba * accG(i), l1 * ba * accG(i + 1));
      sts32(tDm.at(a, u), pack2<T>(l0 * ba * decayRatio<Decay>(sm.cs.b, a, u),
                                   l1 * ba * decayRatio<Decay>(sm.cs.b, a, u + 1)));
    });
    s0 = quadRowSum(s0);
    s1 = quadRowSum(s1);
    if ((wtid & 3) == 0) {
      sm.dlg[r0] = s0;
      sm.dlg[r0 + 8] = s1;
    }
  }
  copyWait<0>();  // the dk part's first key block
  fenceToAsyncProxy();
  __syncthreads();  // dM, E, the dk part

  // Phase 4: dk (1); dbeta and db (0).
  if (wg == 1) {
    typename Tiles::MmaMK mmaMK;
    auto thr = mmaMK.get_thread_slice(wtid);
    auto thrT = mmaTW.get_thread_slice(wtid);
    Tensor fKt = thr.partition_fragment_B(tKt.tensor()(_, _, 0));
    issue(accK);
    gemm<false>(mmaMK, thr.partition_fragment_A(tDm.tensor()(_, _, 0)), fKt, accK);
    gemm<false>(mmaTW, thrT.partition_fragment_A(tDmT.tensor()(_, _, 0)),
                thrT.partition_fragment_B(tKt.tensor()(_, _, 0)), accK);
    commitAndWait(accK);
  } else if (wtid < C) {
    const int t = wtid;
    if (p.dbeta && t < rows) p.dbeta[(tok0 + t) * H + h] = sm.dbeta[t] + sm.dlg[t];
    if (wantDg) {  // db_t: stage 4's parts, k . exp(b) Tm^T dW, E's row minus its column
      float e = 0.f;
      for (int s = 0; s < t; ++s) e += sm.scr[t * kLd + s];
      for (int a = t + 1; a < C; ++a) e -= sm.scr[a * kLd + t];
      float part = 0.f;  // stage 4's key blocks, in order
      if (t < rows)
        for (int kb = 0; kb < kGradKeyBlocks; ++kb) part += p.dbpart[((tok0 + t) * H + h) * kGradKeyBlocks + kb];
      sm.db[t] += part + e;
    }
  }
  if (p.dk) {  // dk = accK + the dk part, one staged key block at a time
    for (int kb = 0; kb < Tiles::kKeyBlocks; ++kb) {
      if (kb > 0) {
        __syncthreads();  // the previous key block read
        stageDkPart(kb);
        copyCommit();
        copyWait<0>();
        __syncthreads();
      }
      if (wg == 1) {
        T* dk = static_cast<T*>(p.dk) + offK;
        forEachPair<MmaTW>(cK, [&](int i, int s, int d) {
          if (s < rows && d >= kb * KS && d < (kb + 1) * KS) {
            const float2 a = *reinterpret_cast<const float2*>(&sm.stage[s * kLdStage + d - kb * KS]);
            *reinterpret_cast<uint32_t*>(dk + s * rowK + d) = pack2<T>(accK(i) + a.x, accK(i + 1) + a.y);
          }
        });
      }
    }
  }
  if (!wantDg) return;
  __syncthreads();
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
    for (int kb = 0; kb < kGradKeyBlocks; ++kb) z += p.zpart[(int64_t(blockIdx.x) * H + h) * kGradKeyBlocks + kb];
    if (t0 < rows) p.dg[(tok0 + t0) * H + h] = float(z + suffix);
    if (t0 + 1 < rows) p.dg[(tok0 + t0 + 1) * H + h] = float(z + (suffix - d0));
  }
}

}  // namespace linac::kernels::cuda::hopper
