// Hopper forward, state and output stage: one CTA (one warpgroup) per (sequence, head, block of BV
// value columns) walks the sequence chunk by chunk with the state block S [dk, BV] resident in
// registers as the fp32 accumulator of the product that updates it.
//
// Per chunk of C = 64 tokens (b = cumulative log-decay from the chunk start, chunk_decay.cuh;
// rows past the sequence end are zero):
//   P  = scale * (Q K^T) . exp(b_t - b_s), kept for s <= t                       [C, C]
//   X  = V (additive)  or  X = U - W S (delta rule; U, W from delta_prepare.cuh)  [C, BV]
//   O  = scale * diag(exp(b)) Q S + P X                                           [C, BV]
//   S <- exp(b_last) S + K^T (diag(exp(b_last - b)) X)                            [dk, BV]
// (delta: X is the chunk's d_t = beta_t (v_t - S_{t-1}^T exp(g_t) k_t), so the rule is additive in
// it; recurrence.h.) Products on wgmma (bf16 / fp16 operands, fp32 accumulators), operands in
// 128B-swizzled shared memory (tiles.cuh): Q K^T, Q S and W S in one batch, then P X and K^T X.
// S's bf16 copy (v contiguous) is the B operand of Q S and W S. The next chunk's tiles are
// copied with cp.async into the other of two stages while the current one computes.
#pragma once

#include "chunk_decay.cuh"
#include "forward_params.h"
#include "tiles.cuh"

namespace linac::kernels::cuda::hopper {

template <class T, int DK, int BV, bool kDelta>
struct StateOutputTiles {
  static constexpr int C = kChunk;
  using Qk = RowTile<T, C, DK, 2>;           // q, k, w: [t, d], two stages
  using Kt = Transposed<Qk, C, DK, 2>;      // k as (d, t)
  using Xin = ColTile<T, BV, C, 2>;          // v or u: (v, t), two stages
  using X = ColTile<T, BV, C>;               // X, and X . exp(b_last - b): (v, t)
  using S = ColTile<T, BV, DK>;              // S: (v, d)
  using P = RowTile<T, C, C>;                // [t, s]

  using MmaQK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;    // Q K^T
  using MmaQS = WarpgroupMma<T, C, BV, DK, GMMA::Major::K, GMMA::Major::MN>;  // Q S, W S
  using MmaPX = WarpgroupMma<T, C, BV, C, GMMA::Major::K, GMMA::Major::MN>;   // P X
  using MmaKX = WarpgroupMma<T, DK, BV, C, GMMA::Major::MN, GMMA::Major::MN>; // K^T X

  struct Smem {
    alignas(1024) T q[cosize_v<Qk>];
    alignas(1024) T k[cosize_v<Qk>];
    alignas(1024) T w[kDelta ? cosize_v<Qk> : 8];
    alignas(1024) T xin[cosize_v<Xin>];
    alignas(1024) T x[cosize_v<X>];
    alignas(1024) T xs[cosize_v<X>];
    alignas(1024) T s[cosize_v<S>];
    alignas(1024) T p[cosize_v<P>];
    float g[2][C];
    float b[C];
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;  // + alignment slack
};

template <class T, int DK, int BV, class Decay, bool kDelta>
__global__ void __launch_bounds__(kWarpgroupThreads, 1)
    stateOutputKernel(const ForwardParams p) {
  using Tiles = StateOutputTiles<T, DK, BV, kDelta>;
  constexpr int C = Tiles::C;
  extern __shared__ uint8_t smemRaw[];
  auto& sm = *reinterpret_cast<typename Tiles::Smem*>(
      (reinterpret_cast<uintptr_t>(smemRaw) + 1023) & ~uintptr_t(1023));

  const int tid = threadIdx.x;
  const int vb = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
  const int H = p.heads, DV = p.value_dim, v0 = vb * BV;
  int64_t bos, len;
  if (p.cu_seqlens) {
    bos = p.cu_seqlens[n];
    len = p.cu_seqlens[n + 1] - bos;
  } else {
    bos = int64_t(n) * p.seq_len;
    len = p.seq_len;
  }
  const int numChunks = int((len + C - 1) / C);

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* xin = static_cast<const T*>(kDelta ? p.u : p.v);  // [B, T, H, dv]
  const T* w = static_cast<const T*>(p.w);
  T* o = static_cast<T*>(p.o);

  Tensor sQ = smemTensor(sm.q, typename Tiles::Qk{});     // (C, DK, 2)
  Tensor sK = smemTensor(sm.k, typename Tiles::Qk{});     // (C, DK, 2)
  Tensor sKt = smemTensor(sm.k, typename Tiles::Kt{});    // (DK, C, 2)
  Tensor sW = smemTensor(sm.w, typename Tiles::Qk{});     // (C, DK, 2), delta
  Tensor sXin = smemTensor(sm.xin, typename Tiles::Xin{});  // (BV, C, 2)
  Tensor sX = smemTensor(sm.x, typename Tiles::X{});      // (BV, C, 1)
  Tensor sXs = smemTensor(sm.xs, typename Tiles::X{});    // (BV, C, 1)
  Tensor sS = smemTensor(sm.s, typename Tiles::S{});      // (BV, DK, 1)
  Tensor sP = smemTensor(sm.p, typename Tiles::P{});      // (C, C, 1)

  typename Tiles::MmaQK mmaQK;
  typename Tiles::MmaQS mmaQS;
  typename Tiles::MmaPX mmaPX;
  typename Tiles::MmaKX mmaKX;
  auto thrQK = mmaQK.get_thread_slice(tid);
  auto thrQS = mmaQS.get_thread_slice(tid);
  auto thrPX = mmaPX.get_thread_slice(tid);
  auto thrKX = mmaKX.get_thread_slice(tid);
  Tensor fQ_qk = thrQK.partition_fragment_A(sQ);           // (MMA, M, K, stage)
  Tensor fK_qk = thrQK.partition_fragment_B(sK);
  Tensor fQ_qs = thrQS.partition_fragment_A(sQ);
  Tensor fW_qs = thrQS.partition_fragment_A(sW);
  Tensor fS_qs = thrQS.partition_fragment_B(sS(_, _, 0));
  Tensor fP_px = thrPX.partition_fragment_A(sP(_, _, 0));
  Tensor fXin_px = thrPX.partition_fragment_B(sXin);
  Tensor fX_px = thrPX.partition_fragment_B(sX(_, _, 0));
  Tensor fKt_kx = thrKX.partition_fragment_A(sKt);
  Tensor fXin_kx = thrKX.partition_fragment_B(sXin);
  Tensor fX_kx = thrKX.partition_fragment_B(sX(_, _, 0));
  Tensor fXs_kx = thrKX.partition_fragment_B(sXs(_, _, 0));

  Tensor accP = partition_fragment_C(mmaQK, Shape<Int<C>, Int<C>>{});
  Tensor accO = partition_fragment_C(mmaQS, Shape<Int<C>, Int<BV>>{});
  Tensor accX = partition_fragment_C(mmaQS, Shape<Int<C>, Int<BV>>{});
  Tensor accS = partition_fragment_C(mmaKX, Shape<Int<DK>, Int<BV>>{});
  const auto cP = accCoords<C, C>(mmaQK);
  const auto cO = accCoords<C, BV>(mmaQS);
  const auto cS = accCoords<DK, BV>(mmaKX);

  // S's bf16 copy, from the accumulator.
  auto publishState = [&] {
    storePairs<T>(accS, cS, [&](int d, int v) { return &sS(v, d, 0); });
  };

  // Initial state.
  const int64_t stateOffset = (int64_t(n) * H + h) * DK * DV + v0;  // [N, H, dk, dv]
  CUTE_UNROLL
  for (int i = 0; i < size(accS); ++i) {
    const int d = get<0>(cS(i)), v = get<1>(cS(i));
    accS(i) = p.h0 ? p.h0[stateOffset + int64_t(d) * DV + v] : 0.f;
  }
  publishState();

  const int64_t rowQK = int64_t(H) * DK, rowV = int64_t(H) * DV;
  auto loadChunk = [&](int c, int stage) {
    const int64_t tok0 = bos + int64_t(c) * C;
    const int rows = int(len - int64_t(c) * C < C ? len - int64_t(c) * C : C);
    const int64_t offQK = tok0 * rowQK + int64_t(h) * DK;
    loadTile<false, C, DK, kWarpgroupThreads>(sQ(_, _, stage), q + offQK, rowQK, rows);
    loadTile<false, C, DK, kWarpgroupThreads>(sK(_, _, stage), k + offQK, rowQK, rows);
    if constexpr (kDelta)
      loadTile<false, C, DK, kWarpgroupThreads>(sW(_, _, stage), w + offQK, rowQK, rows);
    loadTile<true, C, BV, kWarpgroupThreads>(sXin(_, _, stage),
                                             xin + tok0 * rowV + int64_t(h) * DV + v0, rowV, rows);
    stageLogDecay<Decay>(sm.g[stage], p.g, tok0, rows, h, H);
  };

  if (numChunks > 0) loadChunk(0, 0);
  copyCommit();

  for (int c = 0; c < numChunks; ++c) {
    const int stage = c & 1;
    const int64_t tok0 = bos + int64_t(c) * C;
    const int rows = int(len - int64_t(c) * C < C ? len - int64_t(c) * C : C);
    copyWait<0>();
    fenceToAsyncProxy();  // this chunk's tiles and (from the last chunk) S^T, for the tensor cores
    __syncthreads();      // ... and every thread is done with the other stage
    if (c + 1 < numChunks) loadChunk(c + 1, stage ^ 1);
    copyCommit();
    if constexpr (Decay::kActive) {
      if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g[stage], p.g, rows, h);
    }

    // Products that read S_c: Q K^T, Q S and (delta) W S.
    issue(accP, accO, accX);
    gemm<true>(mmaQK, fQ_qk(_, _, _, stage), fK_qk(_, _, _, stage), accP);
    gemm<true>(mmaQS, fQ_qs(_, _, _, stage), fS_qs, accO);
    if constexpr (kDelta) gemm<true>(mmaQS, fW_qs(_, _, _, stage), fS_qs, accX);
    commitAndWait(accP, accO, accX);
    if constexpr (Decay::kActive) __syncthreads();  // sm.b written by warp 0

    const float bLast = Decay::kActive ? sm.b[C - 1] : 0.f;
    auto decayAt = [&](int t) { return Decay::kActive ? sm.b[t] : 0.f; };
    CUTE_UNROLL
    for (int i = 0; i < size(accO); ++i) {
      const int t = get<0>(cO(i)), v = get<1>(cO(i));
      accO(i) *= Decay::kActive ? p.scale * __expf(decayAt(t)) : p.scale;
    }
    CUTE_UNROLL
    for (int i = 0; i < size(accP); ++i) {
      const int t = get<0>(cP(i)), s = get<1>(cP(i));
      const float f = Decay::kActive ? __expf(decayAt(t) - decayAt(s)) : 1.f;
      accP(i) = s <= t ? p.scale * accP(i) * f : 0.f;
    }
    storePairs<T>(accP, cP, [&](int t, int s) { return &sP(t, s, 0); });
    if constexpr (kDelta) {
      CUTE_UNROLL
      for (int i = 0; i < size(accX); ++i) {
        const int t = get<0>(cO(i)), v = get<1>(cO(i));
        const float x = float(sXin(v, t, stage)) - accX(i);
        sX(v, t, 0) = T(x);
        if constexpr (Decay::kActive) sXs(v, t, 0) = T(x * __expf(bLast - decayAt(t)));
      }
    } else if constexpr (Decay::kActive) {
      for (int i = tid; i < BV * C; i += kWarpgroupThreads) {
        const int t = i / BV, v = i % BV;
        sXs(v, t, 0) = T(float(sXin(v, t, stage)) * __expf(bLast - decayAt(t)));
      }
    }
    if constexpr (Decay::kActive) {
      const float fLast = __expf(bLast);
      CUTE_UNROLL
      for (int i = 0; i < size(accS); ++i) accS(i) *= fLast;
    }
    fenceToAsyncProxy();
    __syncthreads();

    // Products that finish the chunk: O += P X, S += K^T X_decayed.
    issue(accO, accS);
    if constexpr (kDelta) gemm<false>(mmaPX, fP_px, fX_px, accO);
    else gemm<false>(mmaPX, fP_px, fXin_px(_, _, _, stage), accO);
    if constexpr (Decay::kActive) gemm<false>(mmaKX, fKt_kx(_, _, _, stage), fXs_kx, accS);
    else if constexpr (kDelta) gemm<false>(mmaKX, fKt_kx(_, _, _, stage), fX_kx, accS);
    else gemm<false>(mmaKX, fKt_kx(_, _, _, stage), fXin_kx(_, _, _, stage), accS);
    commitAndWait(accO, accS);

    T* oChunk = o + tok0 * rowV + int64_t(h) * DV + v0;
    storePairs<T>(accO, cO, [&](int t, int v) { return t < rows ? oChunk + t * rowV + v : nullptr; });
    publishState();  // every read of S_c completed before the barrier above
  }

  if (p.ht) {
    CUTE_UNROLL
    for (int i = 0; i < size(accS); ++i) {
      const int d = get<0>(cS(i)), v = get<1>(cS(i));
      p.ht[stateOffset + int64_t(d) * DV + v] = accS(i);
    }
  }
}

}  // namespace linac::kernels::cuda::hopper
