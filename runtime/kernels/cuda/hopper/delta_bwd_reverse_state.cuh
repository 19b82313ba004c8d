// Hopper backward of the delta rule, stage 3 (reverse state pass): one CTA (one warpgroup) per
// (block of BV value columns, head, sequence) walks the chunks last to first with the fp32
// gradient block dS [dk, BV] (starting at d_ht) as the accumulator of the product that updates it.
// Per chunk c, with dD_local from stage 1 and b the chunk's cumulative log-decay:
//   dstates[c] = dS_{c+1}                                          fp32
//   dD  = dD_local + diag(exp(b_last - b)) K dS_{c+1}               fp32, written over dD_local
//   dS <- exp(b_last) dS + Q^T (scale diag(exp(b)) dO) - W^T dD     = dS_c;  d_h0 = dS at the end
// K dS takes dS as hi + lo (two wgmma): with a bf16 dS the host transcription measured dbeta at
// 3.8e-3 against the 5e-3 gate. W^T dD reads dD in the input dtype (below 3e-4 in every gradient).
// K, d_o and g are double-buffered (one chunk ahead); q and w, which only the second product
// reads, have one stage, refilled as soon as that product is done and waited for only before the
// next one, so the CTA fits two per SM at dk = 128. The tiles arrive by tensor-map copies
// (tma.cuh), g by cp.async, each group on its mbarrier.
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
    uint64_t firstLoaded[2];  // a stage's k, d_o and g have landed
    uint64_t secondLoaded;    // q and w have landed
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DK, int BV, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads, 2)
    deltaBwdReverseStateKernel(const DeltaBackwardParams p, const __grid_constant__ DeltaStateMaps maps) {
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
  const int64_t rowV = int64_t(H) * DV;

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
  const auto origin = tokenMapOrigin<C>(p, n, bos);  // chunk c at (origin.chunk(c), origin.seq) of the maps
  // Copy groups: thread 0 announces and issues the boxes; every thread arrives once its cp.async
  // copies (g) have landed. first(i) fills stage i % 2 of k and d_o; second(i) q and w.
  auto loadFirst = [&](int c, int stage) {  // what the first product and the scaling read
    uint64_t* bar = &sm.firstLoaded[stage];
    if (tid == 0)
      bulkLoadKeyValueChunk<C, DK, BV>(tK, tO, stage, &maps.k, &maps.d_o, v0, h, origin.chunk(c), origin.seq, bar);
    stageLogDecay<Decay>(sm.g[stage], p.g, tokOf(c), rowsOf(c), h, H);
    copyArrive(bar);
  };
  auto loadSecond = [&](int c) {  // what only the second product reads
    if (tid == 0) {
      barrierExpectBytes(&sm.secondLoaded, 2 * C * DK * sizeof(T));
      bulkLoadTile4d<false, C, DK>(tQ, 0, &maps.q, 0, h, origin.chunk(c), origin.seq, &sm.secondLoaded);
      bulkLoadTile4d<false, C, DK>(tW, 0, &maps.w, 0, h, origin.chunk(c), origin.seq, &sm.secondLoaded);
    }
    copyArrive(&sm.secondLoaded);
  };
  // Rows past a packed sequence's end came from the next sequence's tokens: zero them.
  const bool packed = p.cu_seqlens != nullptr;
  if (tid == 0) {
    barrierInit(&sm.firstLoaded[0], kWarpgroupThreads);
    barrierInit(&sm.firstLoaded[1], kWarpgroupThreads);
    barrierInit(&sm.secondLoaded, kWarpgroupThreads);
  }
  __syncthreads();  // the mbarriers exist before any thread arrives
  if (numChunks > 0) {
    loadFirst(chunkOf(0), 0);
    loadSecond(chunkOf(0));
  }

  constexpr int kPairs = decltype(size(accD))::value / 2;
  for (int i = 0; i < numChunks; ++i) {
    const int stage = i & 1, c = chunkOf(i), rows = rowsOf(c);
    barrierWait(&sm.firstLoaded[stage], uint32_t(i >> 1) & 1u);  // first(i)
    if (packed && rows < C) {
      zeroRows<false, C, DK, kWarpgroupThreads>(tK, stage, rows);
      zeroRows<true, C, BV, kWarpgroupThreads>(tO, stage, rows);
    }
    fenceToAsyncProxy();  // ... and dS's copies, for the tensor cores
    __syncthreads();
    if (i + 1 < numChunks) loadFirst(chunkOf(i + 1), stage ^ 1);
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
    barrierWait(&sm.secondLoaded, uint32_t(i) & 1u);  // second(i)
    if (packed && rows < C) {
      zeroRows<false, C, DK, kWarpgroupThreads>(tQ, 0, rows);
      zeroRows<false, C, DK, kWarpgroupThreads>(tW, 0, rows);
    }
    fenceToAsyncProxy();
    __syncthreads();

    issue(accS);
    gemm<false>(mmaXY, fQt, fOs, accS);
    gemm<false>(mmaXY, fWt, fDd, accS);
    commitAndWait(accS);
    __syncthreads();  // every warp's reads of q and w done before thread 0 refills them
    if (i + 1 < numChunks) loadSecond(chunkOf(i + 1));
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
