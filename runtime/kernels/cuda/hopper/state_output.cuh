// Hopper forward, state and output stage: one CTA (one warpgroup) per (sequence, head, block of BV
// value columns) walks the sequence chunk by chunk with the state block S [dk, BV] resident in
// registers as the fp32 accumulator of the product that updates it.
//
// Per chunk of C = 64 tokens (b = cumulative log-decay from the chunk start, chunk_decay.cuh;
// rows past the sequence end are zero):
//   P  = scale * (Q K^T) . exp(b_t - b_s), kept for s <= t                       [C, C]
//        (computed here for the additive rule unless its decay comes WithPreparedScores; the
//        delta rule's, the diagonal decay's and scores_prepare.cuh's preparations write it, and
//        the state stage loads it per chunk)
//   X  = V (additive)  or  X = U - W S (delta rule; U, W from delta_prepare.cuh)  [C, BV]
//   O  = scale * diag(exp(b)) Q S + P X                                           [C, BV]
//   S <- exp(b_last) S + K^T (diag(exp(b_last - b)) X)                            [dk, BV]
// (delta: X is the chunk's d_t = beta_t (v_t - S_{t-1}^T exp(g_t) k_t), so the rule is additive in
// it; recurrence.h.) Products on wgmma (bf16 / fp16 operands, fp32 accumulators), operands in
// swizzled shared memory (tiles.cuh): Q K^T (additive), Q S and W S (delta) in one batch, then
// P X and K^T X. S's
// bf16 copy (v contiguous) is the B operand of Q S and W S. The next chunk's tiles are copied
// with cp.async into the other of two stages while the current one computes.
//
// One warp per scheduler leaves every instruction's latency exposed, so the per-element work
// between the products is kept to register math and 4- / 16-byte shared accesses at addresses
// the swizzle folds into (SmemTile), and BV = 32 puts two CTAs on an SM where the grid allows.
// kLate keeps one stage of q and w, which only the first batch reads, and copies the next
// chunk's as soon as that batch is done: the delta rule's CTA then fits two per SM at BV = 32.
// kOverlap (the delta rule; p.overlap at launch, where forward.cu's timing picks it) puts the
// state's chain S_c -> W S -> X -> K^T X -> S_{c+1} first in each batch: W S and K^T X are
// committed as batches of their own and waited for alone, so Q S runs while X is formed and P X
// while the new state is published.
// A chunk's tiles (q, w, k, v or u, P) arrive by tensor-map copies issued by one thread (tma.cuh),
// completing on the stage's mbarrier with the log-decays' cp.async; rows past a batch's end are
// zeros from the copy, rows past a packed sequence's end are zeroed here.
#pragma once

#include "chunk_decay.cuh"
#include "forward_params.h"
#include "tiles.cuh"
#include "tma.cuh"

namespace linac::kernels::cuda::hopper {

template <class T, int DK, int BV, bool kDelta, bool kLate = false, bool kDiag = false,
          bool kScoresPrepared = false>
struct StateOutputTiles {
  static constexpr int C = kChunk;
  // P from a preparation (ForwardParams::pd): the delta rule's, the diagonal decay's, or
  // scores_prepare.cuh's for the additive rule's other decays
  static constexpr bool kLoadP = kDelta || kDiag || kScoresPrepared;
  static constexpr int kQwStages = kLate ? 1 : 2;
  using Qw = RowTile<T, C, DK, kQwStages>;  // q, w: [t, d]
  using Qk = RowTile<T, C, DK, 2>;           // k: [t, d], two stages
  using Kt = Transposed<Qk, C, DK, 2>;      // k as (d, t)
  using Xin = ColTile<T, BV, C, 2>;          // v or u: (v, t), two stages
  using X = ColTile<T, BV, C>;               // X, and X . exp(b_last - b): (v, t)
  using S = ColTile<T, BV, DK>;              // S: (v, d)
  using P = RowTile<T, C, C, kLoadP ? 2 : 1>;  // [t, s]; loaded per chunk (two stages) when kLoadP

  using MmaQK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;    // Q K^T
  using MmaQS = WarpgroupMma<T, C, BV, DK, GMMA::Major::K, GMMA::Major::MN>;  // Q S, W S
  using MmaPX = WarpgroupMma<T, C, BV, C, GMMA::Major::K, GMMA::Major::MN>;   // P X
  using MmaKX = WarpgroupMma<T, DK, BV, C, GMMA::Major::MN, GMMA::Major::MN>; // K^T X

  // The tiles' tensor maps (tma.cuh): q, k, w boxes of [tokens, H, DK], v / u of [tokens, H, DV],
  // each as (columns, heads, tokens, sequences); P of [slots H C, C].
  struct Maps {
    CUtensorMap q, k, w, xin, p;
  };

  struct Smem {
    alignas(1024) T q[cosize_v<Qw>];
    alignas(1024) T k[cosize_v<Qk>];
    alignas(1024) T w[kDelta ? cosize_v<Qw> : 8];
    alignas(1024) T xin[cosize_v<Xin>];
    alignas(1024) T x[cosize_v<X>];
    alignas(1024) T xs[cosize_v<X>];
    alignas(1024) T s[cosize_v<S>];
    alignas(1024) T p[cosize_v<P>];
    float g[2][C];
    float b[C];
    alignas(16) float decay[kDiag ? 2 : 1][kDiag ? DK : 4];  // exp(b_last) per channel
    uint64_t loaded[2];  // a stage's tiles (with kLate, all but q and w) have landed
    uint64_t qwLoaded;   // (kLate) q and w have landed
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;  // + alignment slack
};

/// The tiles of the state stage for a decay class: a diagonal decay arrives applied
/// (diagonal_prepare.cuh) and stages P and the per-channel decay per chunk; a decay
/// WithPreparedScores stages P. Kernel and launch both size shared memory through this alias.
template <class T, int DK, int BV, class Decay, bool kDelta, bool kLate = false>
using StateOutputTilesFor = StateOutputTiles<T, DK, BV, kDelta, kLate, Decay::kClass == DecayClass::Diagonal,
                                             Decay::kScoresPrepared>;

template <class T, int DK, int BV, class Decay, bool kDelta, bool kLate = false, bool kOverlap = false>
__global__ void __launch_bounds__(kWarpgroupThreads, BV <= kNarrowValueBlock ? 2 : 1)
    stateOutputKernel(const ForwardParams p,
                      const __grid_constant__ typename StateOutputTilesFor<T, DK, BV, Decay, kDelta, kLate>::Maps maps) {
  // A diagonal decay arrives applied (diagonal_prepare.cuh): q and k are qd and kd, P is loaded
  // instead of computed, and the state's rows are scaled by exp(b_last) per channel.
  constexpr bool kDiag = Decay::kClass == DecayClass::Diagonal;
  static_assert(!(kDiag && kDelta), "the delta rule with a diagonal decay has no Hopper stage yet");
  using Tiles = StateOutputTilesFor<T, DK, BV, Decay, kDelta, kLate>;
  constexpr bool kLoadP = Tiles::kLoadP;
  using MmaQK = typename Tiles::MmaQK;
  using MmaQS = typename Tiles::MmaQS;
  using MmaKX = typename Tiles::MmaKX;
  constexpr int C = Tiles::C;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

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

  // q (qd), k (kd), w, v (u) and P arrive through `maps`
  const int64_t slot0 = p.cu_seqlens ? bos / C + n : int64_t(n) * p.chunks_per_seq;
  T* o = static_cast<T*>(p.o);

  const auto tQ = smemTile(sm.q, typename Tiles::Qw{});     // (C, DK, 1 or 2)
  const auto tK = smemTile(sm.k, typename Tiles::Qk{});     // (C, DK, 2)
  const auto tKt = smemTile(sm.k, typename Tiles::Kt{});    // (DK, C, 2)
  const auto tW = smemTile(sm.w, typename Tiles::Qw{});     // (C, DK, 1 or 2), delta
  const auto tXin = smemTile(sm.xin, typename Tiles::Xin{});  // (BV, C, 2)
  const auto tX = smemTile(sm.x, typename Tiles::X{});      // (BV, C)
  const auto tXs = smemTile(sm.xs, typename Tiles::X{});    // (BV, C)
  const auto tS = smemTile(sm.s, typename Tiles::S{});      // (BV, DK)
  const auto tP = smemTile(sm.p, typename Tiles::P{});      // (C, C, 1 or 2)

  MmaQK mmaQK;
  MmaQS mmaQS;
  typename Tiles::MmaPX mmaPX;
  MmaKX mmaKX;
  auto thrQK = mmaQK.get_thread_slice(tid);
  auto thrQS = mmaQS.get_thread_slice(tid);
  auto thrPX = mmaPX.get_thread_slice(tid);
  auto thrKX = mmaKX.get_thread_slice(tid);
  Tensor fQ_qk = thrQK.partition_fragment_A(tQ.tensor());   // (MMA, M, K, stage)
  Tensor fK_qk = thrQK.partition_fragment_B(tK.tensor());
  Tensor fQ_qs = thrQS.partition_fragment_A(tQ.tensor());
  Tensor fW_qs = thrQS.partition_fragment_A(tW.tensor());
  Tensor fS_qs = thrQS.partition_fragment_B(tS.tensor()(_, _, 0));
  Tensor fP_px = thrPX.partition_fragment_A(tP.tensor());  // (MMA, M, K, stage)
  Tensor fXin_px = thrPX.partition_fragment_B(tXin.tensor());
  Tensor fX_px = thrPX.partition_fragment_B(tX.tensor()(_, _, 0));
  Tensor fKt_kx = thrKX.partition_fragment_A(tKt.tensor());
  Tensor fXin_kx = thrKX.partition_fragment_B(tXin.tensor());
  Tensor fX_kx = thrKX.partition_fragment_B(tX.tensor()(_, _, 0));
  Tensor fXs_kx = thrKX.partition_fragment_B(tXs.tensor()(_, _, 0));

  Tensor accP = partition_fragment_C(mmaQK, Shape<Int<C>, Int<C>>{});
  Tensor accO = partition_fragment_C(mmaQS, Shape<Int<C>, Int<BV>>{});
  Tensor accX = partition_fragment_C(mmaQS, Shape<Int<C>, Int<BV>>{});
  Tensor accS = partition_fragment_C(mmaKX, Shape<Int<DK>, Int<BV>>{});
  const auto cP = accCoords<C, C>(mmaQK);
  const auto cO = accCoords<C, BV>(mmaQS);
  const auto cS = accCoords<DK, BV>(mmaKX);

  // S's bf16 copy, from the accumulator (element pairs (d, v), (d, v + 1) are adjacent in S).
  auto publishState = [&] {
    forEachPair<MmaKX>(cS, [&](int i, int d, int v) {
      sts32(tS.at(v, d), pack2<T>(accS(i), accS(i + 1)));
    });
  };

  // Initial state.
  const int64_t stateOffset = (int64_t(n) * H + h) * DK * DV + v0;  // [N, H, dk, dv]
  forEachPair<MmaKX>(cS, [&](int i, int d, int v) {
    const float* h0 = p.h0 + stateOffset + int64_t(d) * DV + v;
    accS(i) = p.h0 ? h0[0] : 0.f;
    accS(i + 1) = p.h0 ? h0[1] : 0.f;
  });
  publishState();

  const int64_t rowV = int64_t(H) * DV;
  auto rowsOf = [&](int c) { return int(len - int64_t(c) * C < C ? len - int64_t(c) * C : C); };
  // The maps' coordinates of chunk c's first token: (token, sequence), a packed batch being one
  // sequence of all its tokens.
  const auto origin = tokenMapOrigin<C>(p, n, bos);  // chunk c at (origin.chunk(c), origin.seq) of the maps
  constexpr uint32_t kQwBytes = (kDelta ? 2 : 1) * C * DK * sizeof(T);
  constexpr uint32_t kRestBytes = (C * DK + C * BV + (kLoadP ? C * C : 0)) * sizeof(T);

  // Chunk c's copies into `stage` (with kLate, q and w on their own mbarrier, into their one
  // stage): thread 0 announces the boxes' bytes and issues them; every thread arrives once its
  // cp.async copies (the log-decays, the diagonal decay) have landed.
  auto loadChunk = [&](int c, int stage, bool withQw) {
    uint64_t* bar = &sm.loaded[stage];
    const int t = origin.chunk(c);
    if (tid == 0) {
      barrierExpectBytes(bar, kRestBytes + (withQw ? kQwBytes : 0));
      if (withQw) {
        bulkLoadTile4d<false, C, DK>(tQ, stage, &maps.q, 0, h, t, origin.seq, bar);
        if constexpr (kDelta) bulkLoadTile4d<false, C, DK>(tW, stage, &maps.w, 0, h, t, origin.seq, bar);
      }
      bulkLoadTile4d<false, C, DK>(tK, stage, &maps.k, 0, h, t, origin.seq, bar);
      bulkLoadTile4d<true, C, BV>(tXin, stage, &maps.xin, v0, h, t, origin.seq, bar);
      if constexpr (kLoadP) bulkLoadTile2d<false, C, C>(tP, stage, &maps.p, 0, int(((slot0 + c) * H + h) * C), bar);
    }
    stageLogDecay<Decay>(sm.g[stage], p.g, bos + int64_t(c) * C, rowsOf(c), h, H);
    if constexpr (kDiag) {
      if (tid < DK / 4)
        copy16(sharedAddress(&sm.decay[stage][4 * tid]), p.decay + ((slot0 + c) * H + h) * DK + 4 * tid, true);
    }
    copyArrive(bar);
  };
  auto loadLateQw = [&](int c) {
    if (tid == 0) {
      barrierExpectBytes(&sm.qwLoaded, kQwBytes);
      bulkLoadTile4d<false, C, DK>(tQ, 0, &maps.q, 0, h, origin.chunk(c), origin.seq, &sm.qwLoaded);
      if constexpr (kDelta) bulkLoadTile4d<false, C, DK>(tW, 0, &maps.w, 0, h, origin.chunk(c), origin.seq, &sm.qwLoaded);
    }
    copyArrive(&sm.qwLoaded);
  };

  if (tid == 0) {
    barrierInit(&sm.loaded[0], kWarpgroupThreads);
    barrierInit(&sm.loaded[1], kWarpgroupThreads);
    barrierInit(&sm.qwLoaded, kWarpgroupThreads);
  }
  __syncthreads();  // the mbarriers exist before any thread arrives
  if (numChunks > 0) {
    loadChunk(0, 0, !kLate);
    if constexpr (kLate) loadLateQw(0);
  }

  // kOverlap is a compile-time choice: with a run-time one, ptxas cannot pair each wait with its
  // batch and serializes every wgmma of the kernel (C7514).
  static_assert(!kOverlap || (kDelta && kLoadP), "the overlapped order is the delta rule's");
  for (int c = 0; c < numChunks; ++c) {
    const int stage = c & 1;
    const int64_t tok0 = bos + int64_t(c) * C;
    const int rows = rowsOf(c);
    const int qwStage = kLate ? 0 : stage;
    barrierWait(&sm.loaded[stage], uint32_t(c >> 1) & 1u);  // the stage's (c / 2)-th fill
    if constexpr (kLate) barrierWait(&sm.qwLoaded, uint32_t(c) & 1u);
    if (p.cu_seqlens != nullptr && rows < C) {  // a packed batch's boxes ran into the next sequence
      zeroRows<false, C, DK, kWarpgroupThreads>(tQ, qwStage, rows);
      if constexpr (kDelta) zeroRows<false, C, DK, kWarpgroupThreads>(tW, qwStage, rows);
      zeroRows<false, C, DK, kWarpgroupThreads>(tK, stage, rows);
      zeroRows<true, C, BV, kWarpgroupThreads>(tXin, stage, rows);
    }
    fenceToAsyncProxy();  // this chunk's tiles and (from the last chunk) S, for the tensor cores
    __syncthreads();      // ... and every thread is done with the other stage
    if (c + 1 < numChunks) loadChunk(c + 1, stage ^ 1, !kLate);
    if constexpr (Decay::kActive) {
      if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g[stage], p.g, rows, h);
    }

    // Products that read S_c: Q K^T, Q S and (delta) W S; with kOverlap, W S first and alone (each
    // batch after its own arrive, so ptxas keeps them pipelined while X reads W S's registers).
    if constexpr (kOverlap) {
      issue(accX);
      gemm<true>(mmaQS, fW_qs(_, _, _, qwStage), fS_qs, accX);
      commitBatch();
      issue(accO);
      gemm<true>(mmaQS, fQ_qs(_, _, _, qwStage), fS_qs, accO);
      commitBatch();
    } else if constexpr (kDelta) {
      issue(accO, accX);
      gemm<true>(mmaQS, fQ_qs(_, _, _, qwStage), fS_qs, accO);
      gemm<true>(mmaQS, fW_qs(_, _, _, qwStage), fS_qs, accX);
      commitAndWait(accO, accX);
    } else if constexpr (kLoadP) {
      issue(accO);
      gemm<true>(mmaQS, fQ_qs(_, _, _, qwStage), fS_qs, accO);
      commitAndWait(accO);
    } else {
      issue(accP, accO);
      gemm<true>(mmaQK, fQ_qk(_, _, _, qwStage), fK_qk(_, _, _, stage), accP);
      gemm<true>(mmaQS, fQ_qs(_, _, _, qwStage), fS_qs, accO);
      commitAndWait(accP, accO);
    }
    // sm.b; without kOverlap also every read of q and w done (with it, Q S may still read them)
    if constexpr (Decay::kActive || kLate) __syncthreads();
    if constexpr (kLate && !kOverlap) {
      if (c + 1 < numChunks) loadLateQw(c + 1);
    }
    if constexpr (kOverlap) waitBatches<1>(accX);  // W S

    const float bLast = Decay::kActive ? sm.b[C - 1] : 0.f;
    if constexpr (!kLoadP) forEachPair<MmaQK>(cP, [&](int i, int t, int s) {
      const float2 ps = maskedScores<Decay>(accP(i), accP(i + 1), t, s, sm.b, p.scale);
      sts32(tP.at(t, s), pack2<T>(ps.x, ps.y));
    });
    if constexpr (kDelta) {
      forEachPair<MmaQS>(cO, [&](int i, int t, int v) {
        const float2 u = unpack2<T>(lds32(tXin.at(v, t, stage)));
        const float x0 = u.x - accX(i), x1 = u.y - accX(i + 1);
        sts32(tX.at(v, t), pack2<T>(x0, x1));
        if constexpr (Decay::kActive) {
          const float f = __expf(bLast - sm.b[t]);
          sts32(tXs.at(v, t), pack2<T>(x0 * f, x1 * f));
        }
      });
    } else if constexpr (Decay::kActive) {
      // X . exp(b_last - b): eight values of one token per 16-byte access.
      constexpr int kVecs = BV * C / 8;
      static_assert(kVecs % kWarpgroupThreads == 0, "whole vectors per thread");
      CUTE_UNROLL
      for (int e = 0; e < kVecs / kWarpgroupThreads; ++e) {
        const int idx = tid + e * kWarpgroupThreads;
        const int t = idx / (BV / 8), v = (idx % (BV / 8)) * 8;
        const float f = __expf(bLast - sm.b[t]);
        uint4 x = lds128(tXin.at(v, t, stage));
        uint32_t* words = reinterpret_cast<uint32_t*>(&x);
        CUTE_UNROLL
        for (int j = 0; j < 4; ++j) {
          const float2 pair = unpack2<T>(words[j]);
          words[j] = pack2<T>(pair.x * f, pair.y * f);
        }
        sts128(tXs.at(v, t), x);
      }
    }
    if constexpr (Decay::kActive) {
      const float fLast = __expf(bLast);
      CUTE_UNROLL
      for (int i = 0; i < size(accS); ++i) accS(i) *= fLast;
    }
    if constexpr (kDiag) {
      forEachPair<MmaKX>(cS, [&](int i, int d, int) {
        const float f = sm.decay[stage][d];
        accS(i) *= f;
        accS(i + 1) *= f;
      });
    }
    if constexpr (kOverlap) waitBatches<0>(accO);  // Q S
    if constexpr (!kDiag) {  // (qd carries the scale and the decay)
      forEachPair<MmaQS>(cO, [&](int i, int t, int) {
        const float f = Decay::kActive ? p.scale * __expf(sm.b[t]) : p.scale;
        accO(i) *= f;
        accO(i + 1) *= f;
      });
    }
    fenceToAsyncProxy();
    __syncthreads();  // X's tiles; with kOverlap also every read of q and w done
    if constexpr (kLate && kOverlap) {
      if (c + 1 < numChunks) loadLateQw(c + 1);
    }

    // Products that finish the chunk: S += K^T X_decayed, O += P X; with kOverlap, the state's
    // first and alone, published while P X runs.
    const int pStage = kLoadP ? stage : 0;
    auto stateProduct = [&] {
      if constexpr (Decay::kActive) gemm<false>(mmaKX, fKt_kx(_, _, _, stage), fXs_kx, accS);
      else if constexpr (kDelta) gemm<false>(mmaKX, fKt_kx(_, _, _, stage), fX_kx, accS);
      else gemm<false>(mmaKX, fKt_kx(_, _, _, stage), fXin_kx(_, _, _, stage), accS);
    };
    auto outputProduct = [&] {
      if constexpr (kDelta) gemm<false>(mmaPX, fP_px(_, _, _, pStage), fX_px, accO);
      else gemm<false>(mmaPX, fP_px(_, _, _, pStage), fXin_px(_, _, _, stage), accO);
    };
    if constexpr (kOverlap) {
      issue(accS);
      stateProduct();
      commitBatch();
      issue(accO);
      outputProduct();
      commitBatch();
      waitBatches<1>(accS);
      publishState();  // every read of S_c completed before the barrier above
      waitBatches<0>(accO);
    } else {
      issue(accO, accS);
      outputProduct();
      stateProduct();
      commitAndWait(accO, accS);
    }

    T* oChunk = o + tok0 * rowV + int64_t(h) * DV + v0;
    forEachPair<MmaQS>(cO, [&](int i, int t, int v) {
      if (t < rows)
        *reinterpret_cast<uint32_t*>(oChunk + t * rowV + v) = pack2<T>(accO(i), accO(i + 1));
    });
    if constexpr (!kOverlap) publishState();  // every read of S_c completed before the barrier above
  }

  if (p.ht) {
    forEachPair<MmaKX>(cS, [&](int i, int d, int v) {
      *reinterpret_cast<float2*>(p.ht + stateOffset + int64_t(d) * DV + v) =
          make_float2(accS(i), accS(i + 1));
    });
  }
}

}  // namespace linac::kernels::cuda::hopper
