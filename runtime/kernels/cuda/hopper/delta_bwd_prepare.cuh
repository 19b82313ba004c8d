// Hopper backward of the delta rule, stage 1 (preparation): chunk-parallel, one CTA (one warpgroup)
// per (chunk slot, head); nothing here depends on the state. With b the chunk's cumulative
// log-decay (delta_bwd_common.cuh), Gam_ts = exp(b_t - b_s) for s <= t:
//   L   = diag(beta) strict_tril((K K^T) . Gam)             K K^T on wgmma, L in fp32 shared memory
//   X   = (I + L)^-1                                          in fp32: p.block_inverse (the
//                                                            default) by two 32-row halves on
//                                                            every warp (unit_lower_inverse.cuh),
//                                                            else one thread per column
//   Tm  = X diag(beta),  W = X diag(beta exp(b)) K,  U = Tm V
//   A'  = scale tril((Q K^T) . Gam),  dD_local = A'^T dO     (the readout's part of dD)
// Shared memory: L takes q's bytes once Q K^T is done (two CTAs per SM).
// Written: X [slots, H, C, C] fp32 (the WY backward, stage 5, needs it again), W in the input dtype,
// U and dD_local in fp32. U's product takes Tm as hi + lo (two wgmma): the host transcription
// measured dg at 7e-3 (gate 5e-3) with a bf16 Tm or U; W stays one bf16 product, as the forward's.
// k, q, v and d_o arrive by tensor-map copies (tma.cuh) issued by thread 0 on one mbarrier (a
// packed sequence's partial chunk has its rows past the end zeroed after the copy).
#pragma once

#include "delta_bwd_common.cuh"
#include "delta_bwd_params.h"
#include "unit_lower_inverse.cuh"

namespace linac::kernels::cuda::hopper {

template <class T, int DK, int DV>
struct DeltaBwdPrepareTiles {
  static constexpr int C = kChunk;
  static constexpr int VB = 64;                        // value block of U and dD_local
  static constexpr int kValueBlocks = DV / VB;
  using K = RowTile<T, C, DK>;                         // k, q: [t, d]
  using Kt = Transposed<K, C, DK>;                     // k as (d, t)
  using V = ColTile<T, VB, C, kValueBlocks>;           // v, d_o: (v, t, value block)
  using Sq = RowTile<T, C, C>;                         // Tm (hi, lo), X diag(beta exp b), A': [t, s]
  using SqT = Transposed<Sq, C, C>;                    // A' as (s, t)

  using MmaKK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;    // K K^T, Q K^T
  using MmaW = WarpgroupMma<T, C, DK, C, GMMA::Major::K, GMMA::Major::MN>;    // W
  using MmaU = WarpgroupMma<T, C, VB, C, GMMA::Major::K, GMMA::Major::MN>;    // U
  using MmaAtO = WarpgroupMma<T, C, VB, C, GMMA::Major::MN, GMMA::Major::MN>; // A'^T dO

  // Tensor maps (tma.cuh): k, q as (64, 1, C, 1) boxes of [sequences, tokens, H, dk], v, d_o as
  // (VB, 1, C, 1) boxes of [sequences, tokens, H, dv].
  struct Maps {
    CUtensorMap k, q, v, d_o;
  };

  static constexpr int kLdL = C + 4;  // rows of L in 16-byte vectors
  // q is read only by the Q K^T product, L only after it: they share their bytes, which keeps the
  // CTA under half of an SM's shared memory (two CTAs per SM instead of one).
  struct Smem {
    alignas(1024) T k[cosize_v<K>];
    union {
      alignas(1024) T q[cosize_v<K>];
      alignas(16) float l[C * kLdL];
    };
    alignas(1024) T v[cosize_v<V>];
    alignas(1024) T o[cosize_v<V>];
    alignas(1024) T tmHi[cosize_v<Sq>];
    alignas(1024) T tmLo[cosize_v<Sq>];
    alignas(1024) T tw[cosize_v<Sq>];
    alignas(1024) T ap[cosize_v<Sq>];
    DeltaChunkScalars cs;
    uint64_t loaded;  // k, q, v, d_o and the scalars have landed
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DK, int DV, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads)
    deltaBwdPrepareKernel(const DeltaBackwardParams p, const __grid_constant__ typename DeltaBwdPrepareTiles<T, DK, DV>::Maps maps) {
  using Tiles = DeltaBwdPrepareTiles<T, DK, DV>;
  using MmaKK = typename Tiles::MmaKK;
  constexpr int C = Tiles::C, VB = Tiles::VB;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, h = blockIdx.y, H = p.heads;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowK = int64_t(H) * DK, rowV = int64_t(H) * DV;
  const int64_t offK = tok0 * rowK + int64_t(h) * DK, offV = tok0 * rowV + int64_t(h) * DV;

  const auto tK = smemTile(sm.k, typename Tiles::K{});      // (C, DK)
  const auto tKt = smemTile(sm.k, typename Tiles::Kt{});    // (DK, C)
  const auto tQ = smemTile(sm.q, typename Tiles::K{});      // (C, DK)
  const auto tV = smemTile(sm.v, typename Tiles::V{});      // (VB, C, value block)
  const auto tO = smemTile(sm.o, typename Tiles::V{});      // (VB, C, value block)
  const auto tTmHi = smemTile(sm.tmHi, typename Tiles::Sq{});
  const auto tTmLo = smemTile(sm.tmLo, typename Tiles::Sq{});
  const auto tTw = smemTile(sm.tw, typename Tiles::Sq{});
  const auto tAp = smemTile(sm.ap, typename Tiles::Sq{});
  const auto tApT = smemTile(sm.ap, typename Tiles::SqT{});

  // the maps' (token, sequence) of the chunk (a packed batch is one sequence of all its tokens)
  const auto origin = tokenMapOrigin<C>(p, n, bos);
  const int mapToken = origin.chunk(chunk), mapSeq = origin.seq;  // this chunk in the maps
  if (tid == 0) barrierInit(&sm.loaded, kWarpgroupThreads);
  __syncthreads();  // the mbarrier exists before any thread arrives
  if (tid == 0) {
    barrierExpectBytes(&sm.loaded, (2 * C * DK + 2 * C * DV) * sizeof(T));
    bulkLoadTile4d<false, C, DK>(tK, 0, &maps.k, 0, h, mapToken, mapSeq, &sm.loaded);
    bulkLoadTile4d<false, C, DK>(tQ, 0, &maps.q, 0, h, mapToken, mapSeq, &sm.loaded);
    CUTE_UNROLL
    for (int j = 0; j < Tiles::kValueBlocks; ++j) {
      bulkLoadTile4d<true, C, VB>(tV, j, &maps.v, j * VB, h, mapToken, mapSeq, &sm.loaded);
      bulkLoadTile4d<true, C, VB>(tO, j, &maps.d_o, j * VB, h, mapToken, mapSeq, &sm.loaded);
    }
  }
  stageDeltaScalars<Decay>(sm.cs, p.g, p.beta, tok0, rows, h, H);
  copyArrive(&sm.loaded);
  barrierWait(&sm.loaded, 0);
  if (p.cu_seqlens != nullptr && rows < C) {  // the boxes ran into the next sequence's tokens
    zeroRows<false, C, DK, kWarpgroupThreads>(tK, 0, rows);
    zeroRows<false, C, DK, kWarpgroupThreads>(tQ, 0, rows);
    CUTE_UNROLL
    for (int j = 0; j < Tiles::kValueBlocks; ++j) {
      zeroRows<true, C, VB, kWarpgroupThreads>(tV, j, rows);
      zeroRows<true, C, VB, kWarpgroupThreads>(tO, j, rows);
    }
  }
  fenceToAsyncProxy();
  __syncthreads();
  if (tid < 32) chunkCumsumDouble<Decay>(sm.cs.b, sm.cs.g);

  // K K^T and Q K^T in one batch.
  MmaKK mmaKK;
  auto thrKK = mmaKK.get_thread_slice(tid);
  Tensor accG = partition_fragment_C(mmaKK, Shape<Int<C>, Int<C>>{});
  Tensor accA = partition_fragment_C(mmaKK, Shape<Int<C>, Int<C>>{});
  Tensor fK = thrKK.partition_fragment_B(tK.tensor()(_, _, 0));
  issue(accG, accA);
  gemm<true>(mmaKK, thrKK.partition_fragment_A(tK.tensor()(_, _, 0)), fK, accG);
  gemm<true>(mmaKK, thrKK.partition_fragment_A(tQ.tensor()(_, _, 0)), fK, accA);
  commitAndWait(accG, accA);
  __syncthreads();  // b, and q's last reader is done: L overwrites it

  forEachPair<MmaKK>(accCoords<C, C>(mmaKK), [&](int i, int t, int s) {
    const float bt = sm.cs.beta[t];
    const float g0 = decayRatio<Decay>(sm.cs.b, t, s), g1 = decayRatio<Decay>(sm.cs.b, t, s + 1);
    *reinterpret_cast<float2*>(&sm.l[t * Tiles::kLdL + s]) =
        make_float2(s < t ? bt * accG(i) * g0 : 0.f, s + 1 < t ? bt * accG(i + 1) * g1 : 0.f);
    sts32(tAp.at(t, s), pack2<T>(p.scale * accA(i) * g0, p.scale * accA(i + 1) * g1));
  });
  __syncthreads();

  T* w = static_cast<T*>(p.w);
  float* xOut = p.x + (int64_t(blockIdx.x) * H + h) * (C * C);  // [C, C]
  if (p.block_inverse) {
    unitLowerInverse<C, kWarpgroupThreads>(sm.l, Tiles::kLdL);
    // X's column pairs (j, j + 1) of one row: 8-byte stores of X, 4-byte stores of the tiles
    for (int e = tid; e < C * C / 2; e += kWarpgroupThreads) {
      const int i = e / (C / 2), j = (e % (C / 2)) * 2;
      const float x0 = xAt(sm.l, Tiles::kLdL, i, j), x1 = xAt(sm.l, Tiles::kLdL, i, j + 1);
      *reinterpret_cast<float2*>(xOut + i * C + j) = make_float2(x0, x1);
      const float tm0 = x0 * sm.cs.beta[j], tm1 = x1 * sm.cs.beta[j + 1];
      const T hi0(tm0), hi1(tm1);
      sts32(tTmHi.at(i, j), pack2<T>(float(hi0), float(hi1)));
      sts32(tTmLo.at(i, j), pack2<T>(tm0 - float(hi0), tm1 - float(hi1)));
      sts32(tTw.at(i, j), pack2<T>(tm0 * decayFrom<Decay>(sm.cs.b, j), tm1 * decayFrom<Decay>(sm.cs.b, j + 1)));
    }
  } else if (tid < C) {  // column j = tid of X = (I + L)^-1; every thread reads the same row of L
    const int j = tid;
    float x[C];
    unitLowerColumn<C>(sm.l, Tiles::kLdL, j, x);
    const float bj = sm.cs.beta[j], fj = bj * decayFrom<Decay>(sm.cs.b, j);
    CUTE_UNROLL
    for (int i = 0; i < C; ++i) {
      xOut[i * C + j] = x[i];
      const float tm = x[i] * bj;
      const T hi(tm);
      sts16(tTmHi.at(i, j), hi.raw());
      sts16(tTmLo.at(i, j), pack1<T>(tm - float(hi)));
      sts16(tTw.at(i, j), pack1<T>(x[i] * fj));
    }
  }
  fenceToAsyncProxy();
  __syncthreads();

  {  // W = X diag(beta exp(b)) K
    typename Tiles::MmaW mma;
    auto thr = mma.get_thread_slice(tid);
    Tensor acc = partition_fragment_C(mma, Shape<Int<C>, Int<DK>>{});
    issue(acc);
    gemm<true>(mma, thr.partition_fragment_A(tTw.tensor()(_, _, 0)),
               thr.partition_fragment_B(tKt.tensor()(_, _, 0)), acc);
    commitAndWait(acc);
    forEachPair<typename Tiles::MmaW>(accCoords<C, DK>(mma), [&](int i, int t, int d) {
      if (t < rows)
        *reinterpret_cast<uint32_t*>(w + offK + t * rowK + d) = pack2<T>(acc(i), acc(i + 1));
    });
  }

  // Per value block: U = (Tm_hi + Tm_lo) V and dD_local = A'^T dO, fp32.
  typename Tiles::MmaU mmaU;
  typename Tiles::MmaAtO mmaO;
  auto thrU = mmaU.get_thread_slice(tid);
  auto thrO = mmaO.get_thread_slice(tid);
  Tensor fTmHi = thrU.partition_fragment_A(tTmHi.tensor()(_, _, 0));
  Tensor fTmLo = thrU.partition_fragment_A(tTmLo.tensor()(_, _, 0));
  Tensor fV = thrU.partition_fragment_B(tV.tensor());  // (MMA, N, K, value block)
  Tensor fApT = thrO.partition_fragment_A(tApT.tensor()(_, _, 0));
  Tensor fO = thrO.partition_fragment_B(tO.tensor());
  Tensor accU = partition_fragment_C(mmaU, Shape<Int<C>, Int<VB>>{});
  Tensor accO = partition_fragment_C(mmaO, Shape<Int<C>, Int<VB>>{});
  const auto cU = accCoords<C, VB>(mmaU);
  CUTE_UNROLL
  for (int j = 0; j < Tiles::kValueBlocks; ++j) {
    issue(accU, accO);
    gemm<true>(mmaU, fTmHi, fV(_, _, _, j), accU);
    gemm<false>(mmaU, fTmLo, fV(_, _, _, j), accU);
    gemm<true>(mmaO, fApT, fO(_, _, _, j), accO);
    commitAndWait(accU, accO);
    forEachPair<typename Tiles::MmaU>(cU, [&](int i, int t, int c) {
      if (t < rows) {
        const int64_t e = offV + t * rowV + j * VB + c;
        *reinterpret_cast<float2*>(p.ud + e) = make_float2(accU(i), accU(i + 1));
        *reinterpret_cast<float2*>(p.dd + e) = make_float2(accO(i), accO(i + 1));
      }
    });
  }
}

}  // namespace linac::kernels::cuda::hopper
