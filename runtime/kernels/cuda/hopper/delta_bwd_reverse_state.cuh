// Hopper backward of the delta rule, stage 3 (reverse state pass): one CTA (one warpgroup) per
// (block of BV value columns, head, sequence) walks the chunks last to first with the fp32
// gradient block dS [dk, BV] (starting at d_ht) as the accumulator of the product that updates it.
// Per chunk c, with dD_local from stage 1 and b the chunk's cumulative log-decay:
//   dstates[c] = dS_{c+1}                                          fp32
//   dD  = dD_local + diag(exp(b_last - b)) K dS_{c+1}               fp32, written over dD_local
//   dS <- exp(b_last) dS + Q^T (scale diag(exp(b)) dO) - W^T dD     = dS_c;  d_h0 = dS at the end
// K dS takes dS as hi + lo (two wgmma): with a bf16 dS the host transcription measured dbeta at
// 3.8e-3 against the 5e-3 gate. W^T dD reads dD in the input dtype (below 3e-4 in every gradient).
// K, d_o and g are double-buffered (cp.async, one chunk ahead); q and w, which only the second
// product reads, have one stage, refilled as soon as that product is done and waited for only
// before the next one, so the CTA fits two per SM at dk = 128.
#pragma once

#include "delta_bwd_common.cuh"
#include "delta_bwd_params.h"

namespace linac::kernels::cuda::hopper {

template <class T, int DK, int BV>
struct DeltaBwdReverseStateTiles {
  static constexpr int C = kChunk;
  using K = RowTile<T, C, DK, 2>;           // k: [t, d], two stages
  using Qw = RowTile<T, C, DK>;             // q, w: [t, d]
  using QwT = Transposed<Qw, C, DK>;        // (d, t)
  using O = ColTile<T, BV, C, 2>;           // d_o: (v, t), two stages
  using Y = ColTile<T, BV, C>;              // scale exp(b) d_o, and -dD: (v, t)
  using S = ColTile<T, BV, DK>;             // dS hi, lo: (v, d)
  using MmaKS = WarpgroupMma<T, C, BV, DK, GMMA::Major::K, GMMA::Major::MN>;   // K dS
  using MmaXY = WarpgroupMma<T, DK, BV, C, GMMA::Major::MN, GMMA::Major::MN>;  // Q^T Y, W^T Y

  struct Smem {
    alignas(1024) T k[cosize_v<K>];
    alignas(1024) T q[cosize_v<Qw>];
    alignas(1024) T w[cosize_v<Qw>];
    alignas(1024) T o[cosize_v<O>];
    alignas(1024) T os[cosize_v<Y>];
    alignas(1024) T dd[cosize_v<Y>];
    alignas(1024) T sHi[cosize_v<S>];
    alignas(1024) T sLo[cosize_v<S>];
    float g[2][C];
    double b[C];
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DK, int BV, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads, 2)
    deltaBwdReverseStateKernel(const DeltaBackwardParams p) {
  using Tiles = DeltaBwdReverseStateTiles<T, DK, BV>;
  using MmaKS = typename Tiles::MmaKS;
  using MmaXY = typename Tiles::MmaXY;
  constexpr int C = Tiles::C;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  const int tid = threadIdx.x;
  const int h = blockIdx.y, n = blockIdx.z, H = p.heads, DV = p.value_dim, v0 = blockIdx.x * BV;
  int64_t bos, len, coff;
  seqInfo<C>(p, n, bos, len, coff);
  const int numChunks = int((len + C - 1) / C);
  const int64_t rowK = int64_t(H) * DK, rowV = int64_t(H) * DV;

  const auto tK = smemTile(sm.k, typename Tiles::K{});       // (C, DK, 2)
  const auto tQ = smemTile(sm.q, typename Tiles::Qw{});      // (C, DK)
  const auto tQt = smemTile(sm.q, typename Tiles::QwT{});    // (DK, C)
  const auto tW = smemTile(sm.w, typename Tiles::Qw{});
  const auto tWt = smemTile(sm.w, typename Tiles::QwT{});
  const auto tO = smemTile(sm.o, typename Tiles::O{});       // (BV, C, 2)
  const auto tOs = smemTile(sm.os, typename Tiles::Y{});     // (BV, C)
  const auto tDd = smemTile(sm.dd, typename Tiles::Y{});     // (BV, C)
  const auto tSHi = smemTile(sm.sHi, typename Tiles::S{});   // (BV, DK)
  const auto tSLo = smemTile(sm.sLo, typename Tiles::S{});

  MmaKS mmaKS;
  MmaXY mmaXY;
  auto thrKS = mmaKS.get_thread_slice(tid);
  auto thrXY = mmaXY.get_thread_slice(tid);
  Tensor fK = thrKS.partition_fragment_A(tK.tensor());  // (MMA, M, K, stage)
  Tensor fSHi = thrKS.partition_fragment_B(tSHi.tensor()(_, _, 0));
  Tensor fSLo = thrKS.partition_fragment_B(tSLo.tensor()(_, _, 0));
  Tensor fQt = thrXY.partition_fragment_A(tQt.tensor()(_, _, 0));
  Tensor fWt = thrXY.partition_fragment_A(tWt.tensor()(_, _, 0));
  Tensor fOs = thrXY.partition_fragment_B(tOs.tensor()(_, _, 0));
  Tensor fDd = thrXY.partition_fragment_B(tDd.tensor()(_, _, 0));
  Tensor accD = partition_fragment_C(mmaKS, Shape<Int<C>, Int<BV>>{});
  Tensor accS = partition_fragment_C(mmaXY, Shape<Int<DK>, Int<BV>>{});
  const auto cD = accCoords<C, BV>(mmaKS);
  const auto cS = accCoords<DK, BV>(mmaXY);

  auto publishState = [&] {  // dS as hi + lo in the input dtype, (v, d) pairs
    forEachPair<MmaXY>(cS, [&](int i, int d, int v) {
      uint32_t hi, lo;
      splitPack2<T>(accS(i), accS(i + 1), hi, lo);
      sts32(tSHi.at(v, d), hi);
      sts32(tSLo.at(v, d), lo);
    });
  };
  const int64_t stateOffset = (int64_t(n) * H + h) * DK * DV + v0;  // [N, H, dk, dv]
  forEachPair<MmaXY>(cS, [&](int i, int d, int v) {
    const float* s0 = p.d_ht + stateOffset + int64_t(d) * DV + v;
    accS(i) = p.d_ht ? s0[0] : 0.f;
    accS(i + 1) = p.d_ht ? s0[1] : 0.f;
  });
  publishState();

  auto chunkOf = [&](int i) { return numChunks - 1 - i; };
  auto rowsOf = [&](int c) { return int(len - int64_t(c) * C < C ? len - int64_t(c) * C : C); };
  auto tokOf = [&](int c) { return bos + int64_t(c) * C; };
  auto loadFirst = [&](int c, int stage) {  // what the first product and the scaling read
    loadTile<false, C, DK, kWarpgroupThreads>(tK, stage, static_cast<const T*>(p.k) + tokOf(c) * rowK +
                                              int64_t(h) * DK, rowK, rowsOf(c));
    loadTile<true, C, BV, kWarpgroupThreads>(tO, stage, static_cast<const T*>(p.d_o) + tokOf(c) * rowV +
                                             int64_t(h) * DV + v0, rowV, rowsOf(c));
    stageLogDecay<Decay>(sm.g[stage], p.g, tokOf(c), rowsOf(c), h, H);
  };
  auto loadSecond = [&](int c) {  // what only the second product reads
    const int64_t off = tokOf(c) * rowK + int64_t(h) * DK;
    loadTile<false, C, DK, kWarpgroupThreads>(tQ, 0, static_cast<const T*>(p.q) + off, rowK, rowsOf(c));
    loadTile<false, C, DK, kWarpgroupThreads>(tW, 0, static_cast<const T*>(p.w) + off, rowK, rowsOf(c));
  };
  // cp.async groups, in commit order: first(0), second(0), then per chunk i first(i + 1) at its top
  // and second(i + 1) at its end; so at the top of chunk i the newest group is second(i), and
  // before its second product the newest is first(i + 1).
  if (numChunks > 0) loadFirst(chunkOf(0), 0);
  copyCommit();
  if (numChunks > 0) loadSecond(chunkOf(0));
  copyCommit();

  constexpr int kPairs = decltype(size(accD))::value / 2;
  for (int i = 0; i < numChunks; ++i) {
    const int stage = i & 1, c = chunkOf(i), rows = rowsOf(c);
    copyWait<1>();        // first(i)
    fenceToAsyncProxy();  // ... and dS's copies, for the tensor cores
    __syncthreads();
    if (i + 1 < numChunks) loadFirst(chunkOf(i + 1), stage ^ 1);
    copyCommit();
    if (tid < 32) chunkCumsumDouble<Decay>(sm.b, sm.g[stage]);

    float* slot = p.dstates + ((coff + c) * H + h) * int64_t(DK) * DV + v0;  // dS_{c+1}
    forEachPair<MmaXY>(cS, [&](int e, int d, int v) {
      *reinterpret_cast<float2*>(slot + int64_t(d) * DV + v) = make_float2(accS(e), accS(e + 1));
    });
    float* dd = p.dd + tokOf(c) * rowV + int64_t(h) * DV + v0;
    float2 local[kPairs];
    forEachPair<MmaKS>(cD, [&](int e, int t, int v) {
      local[e / 2] = t < rows ? *reinterpret_cast<const float2*>(dd + t * rowV + v) : make_float2(0.f, 0.f);
    });
    issue(accD);
    gemm<true>(mmaKS, fK(_, _, _, stage), fSHi, accD);
    gemm<false>(mmaKS, fK(_, _, _, stage), fSLo, accD);
    warpgroup_commit_batch();
    __syncthreads();  // b

    {  // scale exp(b_t) d_o, eight values of one token per 16-byte access
      constexpr int kVecs = BV * C / 8;
      static_assert(kVecs % kWarpgroupThreads == 0, "whole vectors per thread");
      CUTE_UNROLL
      for (int e = 0; e < kVecs / kWarpgroupThreads; ++e) {
        const int idx = tid + e * kWarpgroupThreads;
        const int t = idx / (BV / 8), v = (idx % (BV / 8)) * 8;
        const float f = p.scale * decayFrom<Decay>(sm.b, t);
        uint4 x = lds128(tO.at(v, t, stage));
        uint32_t* words = reinterpret_cast<uint32_t*>(&x);
        CUTE_UNROLL
        for (int j = 0; j < 4; ++j) {
          const float2 pair = unpack2<T>(words[j]);
          words[j] = pack2<T>(pair.x * f, pair.y * f);
        }
        sts128(tOs.at(v, t), x);
      }
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(accD);
    forEachPair<MmaKS>(cD, [&](int e, int t, int v) {
      const float f = decayTo<Decay>(sm.b, t);
      const float d0 = local[e / 2].x + f * accD(e), d1 = local[e / 2].y + f * accD(e + 1);
      if (t < rows) *reinterpret_cast<float2*>(dd + t * rowV + v) = make_float2(d0, d1);
      sts32(tDd.at(v, t), pack2<T>(-d0, -d1));
    });
    if constexpr (Decay::kActive) {
      const float fLast = decayFrom<Decay>(sm.b, C - 1);
      CUTE_UNROLL
      for (int e = 0; e < size(accS); ++e) accS(e) *= fLast;
    }
    copyWait<1>();  // second(i)
    fenceToAsyncProxy();
    __syncthreads();

    issue(accS);
    gemm<false>(mmaXY, fQt, fOs, accS);
    gemm<false>(mmaXY, fWt, fDd, accS);
    commitAndWait(accS);
    if (i + 1 < numChunks) loadSecond(chunkOf(i + 1));
    copyCommit();
    publishState();  // every read of dS_{c+1}'s copies completed before the barrier above
  }

  if (p.dh0) {
    forEachPair<MmaXY>(cS, [&](int e, int d, int v) {
      *reinterpret_cast<float2*>(p.dh0 + stateOffset + int64_t(d) * DV + v) =
          make_float2(accS(e), accS(e + 1));
    });
  }
}

}  // namespace linac::kernels::cuda::hopper
