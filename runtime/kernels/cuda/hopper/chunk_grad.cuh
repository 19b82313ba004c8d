// Hopper backward, chunk-parallel gradients of the additive rule (decay none / fixed / scalar,
// inclusive readout), from the state passes' S_c and dS_{c+1} (state_scan.cuh). One CTA of three
// warpgroups per (chunk slot, head); with b the in-chunk cumulative log-decay (chunk_decay.cuh)
// and masks s <= t:
//   A  = scale exp(b_t - b_s) (Q K^T)[t][s]        D  = scale exp(b_t - b_s) (dO V^T)[t][s]
//   dq = scale diag(exp b) dO S_c^T + D K                                  warpgroup 0 (and D)
//   dk = diag(exp(b_last - b)) V dS_{c+1}^T + D^T Q                        warpgroup 1
//   dv = diag(exp(b_last - b)) K dS_{c+1} + A^T dO                         warpgroup 2 (and A)
// and, for a scalar decay, the exact per-token dg_t = <dS_t, exp(g_t) S_{t-1}> expanded over the
// chunk (every term a decayed physical contribution, nothing large cancels; the mma.sync path's
// formula, chunk_backward_additive.cu):
//   dg_t = exp(b_last) <S_c, dS_{c+1}> + sum_{t' >= t} q_t'.dq_inter_t'
//          + sum_{s < t} k_s.dk_inter_s + sum_{s < t <= t'} D[t'][s] (q_t'.k_s)
// with dq_inter, dk_inter the first terms of dq and dk. Products on wgmma from swizzled tiles,
// transposed operands through Transposed views (no second copies); every output written once.
// One CTA a SM (161 KB at dk = dv = 128): the loads arrive in three copy groups on mbarriers
// (q, k, v, d_o; dS_{c+1}; S_c), each warpgroup waiting only for what its next product reads, so
// D and A are formed while the states are still in flight. The tiles are tensor-map copies
// (tma.cuh) issued by thread 0, g a cp.async; a packed sequence's partial chunk has its rows past
// the end zeroed after the copy.
#pragma once

#include "../chunk_slots.cuh"
#include "backward_params.h"
#include "chunk_decay.cuh"
#include "tiles.cuh"
#include "tma.cuh"

namespace linac::kernels::cuda::hopper {

constexpr int kGradThreads = 3 * kWarpgroupThreads;

template <class T, int DK, int DV>
struct ChunkGradTiles {
  static constexpr int C = kChunk;
  using Qk = RowTile<T, C, DK>;            // q, k: [t, d]
  using QkT = Transposed<Qk, C, DK>;       // (d, t)
  using Vo = RowTile<T, C, DV>;            // v, d_o: [t, v]
  using VoT = Transposed<Vo, C, DV>;       // (v, t)
  using St = RowTile<T, DK, DV>;           // S_c, dS_{c+1}: [d, v]
  using StT = Transposed<St, DK, DV>;      // (v, d)
  using Sq = RowTile<T, C, C>;             // A, D: [t, s]
  using SqT = Transposed<Sq, C, C>;        // (s, t)

  using MmaQK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;     // Q K^T
  using MmaOV = WarpgroupMma<T, C, C, DV, GMMA::Major::K, GMMA::Major::K>;     // dO V^T
  using MmaXS = WarpgroupMma<T, C, DK, DV, GMMA::Major::K, GMMA::Major::K>;    // dO S^T, V dS^T
  using MmaDK = WarpgroupMma<T, C, DK, C, GMMA::Major::K, GMMA::Major::MN>;    // D K
  using MmaDtQ = WarpgroupMma<T, C, DK, C, GMMA::Major::MN, GMMA::Major::MN>;  // D^T Q
  using MmaKdS = WarpgroupMma<T, C, DV, DK, GMMA::Major::K, GMMA::Major::MN>;  // K dS
  using MmaAtO = WarpgroupMma<T, C, DV, C, GMMA::Major::MN, GMMA::Major::MN>;  // A^T dO

  // Tensor maps (tma.cuh): q, k, v, d_o as (64, 1, C, 1) boxes of [sequences, tokens, H, width];
  // S_c, dS_{c+1} as (64, DK) boxes of their [slots H dk, dv] rows.
  struct Maps {
    CUtensorMap q, k, v, d_o, s, ds;
  };

  static constexpr int kLdE = C + 4;
  // copy groups, in the order the products need them: q, k, v, d_o and g; dS_{c+1}; S_c
  enum LoadGroup { kChunkTiles, kStateGradient, kState, kLoadGroups };
  struct Smem {
    alignas(1024) T q[cosize_v<Qk>];
    alignas(1024) T k[cosize_v<Qk>];
    alignas(1024) T v[cosize_v<Vo>];
    alignas(1024) T o[cosize_v<Vo>];
    alignas(1024) T s[cosize_v<St>];
    alignas(1024) T ds[cosize_v<St>];
    alignas(1024) T a[cosize_v<Sq>];
    alignas(1024) T d[cosize_v<Sq>];
    alignas(16) float e[C * kLdE];  // D (fp32), then D . (Q K^T), then its row prefix sums
    float g[C];
    float b[C];
    float r2[C];  // q_t . dq_inter_t
    float r3[C];  // k_s . dk_inter_s
    float dot[kWarpgroupThreads / 32];  // <S_c, dS_{c+1}> per warp
    uint64_t loaded[kLoadGroups];       // the copy groups' mbarriers (tiles.cuh)
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

/// This thread's part of <A, B> over stage `stage` of two [R, Cc] tiles (16-byte vectors, a
/// warpgroup's threads striding over them; `wtid` the thread's index in its warpgroup).
template <class T, int R, int Cc, class Tile>
__device__ float tileDotPart(const Tile& a, const Tile& b, int stage, int wtid) {
  float part = 0.f;
  for (int idx = wtid; idx < R * Cc / 8; idx += kWarpgroupThreads) {
    const int r = idx / (Cc / 8), c = (idx % (Cc / 8)) * 8;
    uint4 x = lds128(a.at(r, c, stage)), y = lds128(b.at(r, c, stage));
    const uint32_t* wx = reinterpret_cast<const uint32_t*>(&x);
    const uint32_t* wy = reinterpret_cast<const uint32_t*>(&y);
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) {
      const float2 u = unpack2<T>(wx[j]), v = unpack2<T>(wy[j]);
      part += u.x * v.x + u.y * v.y;
    }
  }
  return part;
}

/// e[t][s] <- e[t][s] (q_t . k_s) for s < t, 0 elsewhere: dg's pair terms, from D in e (fp32)
/// and Q K^T's accumulator (coordinates as forEachPair's).
template <class Mma, int kLdE, class Coords, class Acc>
__device__ void keepPairTerms(const Coords& coords, const Acc& qk, float* e) {
  forEachPair<Mma>(coords, [&](int i, int t, int s) {
    float2* at = reinterpret_cast<float2*>(&e[t * kLdE + s]);
    const float2 d = *at;
    *at = make_float2(s < t ? d.x * qk(i) : 0.f, s + 1 < t ? d.y * qk(i + 1) : 0.f);
  });
}

/// The scalar decay's dg of a chunk (or a key block's share of it) from its terms, called by
/// every thread of the CTA, with e[t'][s] = D[t'][s] (q_t' . k_s) for s < t' (0 elsewhere), r2 the
/// row dots q_t . dq_inter_t, r3 = k_s . dk_inter_s and dot[] the warps' parts of <S_c, dS_{c+1}>
/// (one warpgroup's), bLast = b_{C-1}:
///   dg_t = exp(b_last) <S_c, dS_{c+1}> + sum_{t' >= t} r2[t'] + sum_{s < t} r3[s]
///          + sum_{t' >= t} sum_{s < t} e[t'][s]
/// e's rows become their exclusive prefix sums (threads 0..C-1); thread t < rows returns dg_t.
template <int C, int kLdE>
__device__ float chunkDecayGrad(float* e, const float* r2, const float* r3, const float* dot, float bLast,
                                int rows) {
  const int t = threadIdx.x;
  if (t < C) {
    float* row = &e[t * kLdE];
    float run = 0.f;
    for (int s = 0; s < C; ++s) {
      const float x = row[s];
      row[s] = run;
      run += x;
    }
  }
  __syncthreads();
  float dg = 0.f;
  if (t < rows) {
    float state = 0.f;
    CUTE_UNROLL
    for (int w = 0; w < kWarpgroupThreads / 32; ++w) state += dot[w];
    dg = __expf(bLast) * state;
    for (int tp = t; tp < C; ++tp) dg += r2[tp] + e[tp * kLdE + t];
    for (int s = 0; s < t; ++s) dg += r3[s];
  }
  return dg;
}

template <class T, int DK, int DV, class Decay>
__global__ void __launch_bounds__(kGradThreads, 1)
    chunkGradKernel(const BackwardParams p, const __grid_constant__ typename ChunkGradTiles<T, DK, DV>::Maps maps) {
  using Tiles = ChunkGradTiles<T, DK, DV>;
  constexpr int C = Tiles::C;
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
  const bool wantDg = Decay::kClass == DecayClass::Scalar && p.dg != nullptr;

  const auto tQ = smemTile(sm.q, typename Tiles::Qk{});
  const auto tQt = smemTile(sm.q, typename Tiles::QkT{});
  const auto tK = smemTile(sm.k, typename Tiles::Qk{});
  const auto tKt = smemTile(sm.k, typename Tiles::QkT{});
  const auto tV = smemTile(sm.v, typename Tiles::Vo{});
  const auto tO = smemTile(sm.o, typename Tiles::Vo{});
  const auto tOt = smemTile(sm.o, typename Tiles::VoT{});
  const auto tS = smemTile(sm.s, typename Tiles::St{});
  const auto tDS = smemTile(sm.ds, typename Tiles::St{});
  const auto tDSt = smemTile(sm.ds, typename Tiles::StT{});
  const auto tA = smemTile(sm.a, typename Tiles::Sq{});
  const auto tAt = smemTile(sm.a, typename Tiles::SqT{});
  const auto tD = smemTile(sm.d, typename Tiles::Sq{});
  const auto tDt = smemTile(sm.d, typename Tiles::SqT{});

  // Loads in three copy groups (Tiles::LoadGroup): the products of phase 1 that need only the
  // chunk's tiles start while the two states (64 KB at dk = dv = 128) are still in flight.
  using Group = typename Tiles::LoadGroup;
  auto waitFor = [&](Group group) {
    barrierWait(&sm.loaded[group], 0);
    fenceToAsyncProxy();
  };
  if (tid == 0)
    for (int group = 0; group < Tiles::kLoadGroups; ++group) barrierInit(&sm.loaded[group], kGradThreads);
  __syncthreads();  // the mbarriers exist before any thread arrives
  {
    // the maps' (token, sequence) of the chunk, and its first row of S_c / dS_{c+1}
    const auto origin = tokenMapOrigin<C>(p, n, bos);
    const int mapToken = origin.chunk(chunk), mapSeq = origin.seq;  // this chunk in the maps
    const int stateRow = int(((coff + chunk) * H + h) * DK);
    uint64_t* bars = sm.loaded;
    if (tid == 0) {
      barrierExpectBytes(&bars[Tiles::kChunkTiles], 2 * C * (DK + DV) * sizeof(T));
      bulkLoadTile4d<false, C, DK>(tQ, 0, &maps.q, 0, h, mapToken, mapSeq, &bars[Tiles::kChunkTiles]);
      bulkLoadTile4d<false, C, DK>(tK, 0, &maps.k, 0, h, mapToken, mapSeq, &bars[Tiles::kChunkTiles]);
      bulkLoadTile4d<false, C, DV>(tV, 0, &maps.v, 0, h, mapToken, mapSeq, &bars[Tiles::kChunkTiles]);
      bulkLoadTile4d<false, C, DV>(tO, 0, &maps.d_o, 0, h, mapToken, mapSeq, &bars[Tiles::kChunkTiles]);
      barrierExpectBytes(&bars[Tiles::kStateGradient], DK * DV * sizeof(T));
      bulkLoadTile2d<false, DK, DV>(tDS, 0, &maps.ds, 0, stateRow, &bars[Tiles::kStateGradient]);
      barrierExpectBytes(&bars[Tiles::kState], DK * DV * sizeof(T));
      bulkLoadTile2d<false, DK, DV>(tS, 0, &maps.s, 0, stateRow, &bars[Tiles::kState]);
    }
    stageLogDecay<Decay>(sm.g, p.g, tok0, rows, h, H);
    for (int group = 0; group < Tiles::kLoadGroups; ++group) copyArrive(&bars[group]);
    waitFor(Tiles::kChunkTiles);
    if (p.cu_seqlens != nullptr && rows < C) {  // the boxes ran into the next sequence's tokens
      zeroRows<false, C, DK, kGradThreads>(tQ, 0, rows);
      zeroRows<false, C, DK, kGradThreads>(tK, 0, rows);
      zeroRows<false, C, DV, kGradThreads>(tV, 0, rows);
      zeroRows<false, C, DV, kGradThreads>(tO, 0, rows);
      fenceToAsyncProxy();
      __syncthreads();  // every thread's zeroes before any product reads the tiles
    }
    if constexpr (Decay::kActive) {
      if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g, p.g, rows, h);
      __syncthreads();
    }
  }
  auto decayAt = [&](int t) { return Decay::kActive ? sm.b[t] : 0.f; };
  const float bLast = decayAt(C - 1);

  // Phase 1: D (warpgroup 0), dk_inter and its row dots (1), A and Q K^T (2).
  using MmaQK = typename Tiles::MmaQK;
  using MmaOV = typename Tiles::MmaOV;
  using MmaXS = typename Tiles::MmaXS;
  typename Tiles::MmaXS mmaXS;
  Tensor accX = partition_fragment_C(mmaXS, Shape<Int<C>, Int<DK>>{});  // dq (wg 0) or dk (wg 1)
  const auto cX = accCoords<C, DK>(mmaXS);
  MmaQK mmaQK;
  Tensor accPm = partition_fragment_C(mmaQK, Shape<Int<C>, Int<C>>{});    // Q K^T (wg 2)
  const auto cC = accCoords<C, C>(mmaQK);
  // Row dots of accX with a [t, d] tile into out[] (tiles.cuh)
  auto rowDots = [&](const auto& tile, float* out) { accRowDots<MmaXS>(cX, accX, tile, 0, out); };

  if (wg == 0) {
    MmaOV mma;
    auto thr = mma.get_thread_slice(wtid);
    Tensor acc = partition_fragment_C(mma, Shape<Int<C>, Int<C>>{});
    issue(acc);
    gemm<true>(mma, thr.partition_fragment_A(tO.tensor()(_, _, 0)),
               thr.partition_fragment_B(tV.tensor()(_, _, 0)), acc);
    commitAndWait(acc);
    forEachPair<MmaOV>(accCoords<C, C>(mma), [&](int i, int t, int s) {
      const float2 d = maskedScores<Decay>(acc(i), acc(i + 1), t, s, sm.b, p.scale);
      sts32(tD.at(t, s), pack2<T>(d.x, d.y));
      *reinterpret_cast<float2*>(&sm.e[t * Tiles::kLdE + s]) = d;
    });
  } else if (wg == 1) {
    waitFor(Tiles::kStateGradient);
    auto thr = mmaXS.get_thread_slice(wtid);
    issue(accX);
    gemm<true>(mmaXS, thr.partition_fragment_A(tV.tensor()(_, _, 0)),
               thr.partition_fragment_B(tDS.tensor()(_, _, 0)), accX);
    commitAndWait(accX);
    forEachPair<MmaXS>(cX, [&](int i, int s, int) {
      const float f = Decay::kActive ? __expf(bLast - decayAt(s)) : 1.f;
      accX(i) *= f;
      accX(i + 1) *= f;
    });
    if (wantDg) rowDots(tK, sm.r3);
  } else {
    auto thr = mmaQK.get_thread_slice(wtid);
    issue(accPm);
    gemm<true>(mmaQK, thr.partition_fragment_A(tQ.tensor()(_, _, 0)),
               thr.partition_fragment_B(tK.tensor()(_, _, 0)), accPm);
    commitAndWait(accPm);
    forEachPair<MmaQK>(cC, [&](int i, int t, int s) {
      const float2 a = maskedScores<Decay>(accPm(i), accPm(i + 1), t, s, sm.b, p.scale);
      sts32(tA.at(t, s), pack2<T>(a.x, a.y));
    });
  }
  fenceToAsyncProxy();
  __syncthreads();

  // Phase 2: dq (0), dk (1), dv (2); the pair terms of dg (2).
  if (wg == 0) {
    waitFor(Tiles::kState);
    auto thr = mmaXS.get_thread_slice(wtid);
    issue(accX);
    gemm<true>(mmaXS, thr.partition_fragment_A(tO.tensor()(_, _, 0)),
               thr.partition_fragment_B(tS.tensor()(_, _, 0)), accX);
    commitAndWait(accX);
    forEachPair<MmaXS>(cX, [&](int i, int t, int) {
      const float f = Decay::kActive ? p.scale * __expf(decayAt(t)) : p.scale;
      accX(i) *= f;
      accX(i + 1) *= f;
    });
    if (wantDg) rowDots(tQ, sm.r2);
    typename Tiles::MmaDK mma;
    auto thr2 = mma.get_thread_slice(wtid);
    issue(accX);
    gemm<false>(mma, thr2.partition_fragment_A(tD.tensor()(_, _, 0)),
                thr2.partition_fragment_B(tKt.tensor()(_, _, 0)), accX);
    commitAndWait(accX);
    if (p.dq) {
      T* dq = static_cast<T*>(p.dq) + tok0 * rowK + int64_t(h) * DK;
      forEachPair<MmaXS>(cX, [&](int i, int t, int d) {
        if (t < rows) *reinterpret_cast<uint32_t*>(dq + t * rowK + d) = pack2<T>(accX(i), accX(i + 1));
      });
    }
  } else if (wg == 1) {
    typename Tiles::MmaDtQ mma;
    auto thr = mma.get_thread_slice(wtid);
    issue(accX);
    gemm<false>(mma, thr.partition_fragment_A(tDt.tensor()(_, _, 0)),
                thr.partition_fragment_B(tQt.tensor()(_, _, 0)), accX);
    commitAndWait(accX);
    if (p.dk) {
      T* dk = static_cast<T*>(p.dk) + tok0 * rowK + int64_t(h) * DK;
      forEachPair<MmaXS>(cX, [&](int i, int s, int d) {
        if (s < rows) *reinterpret_cast<uint32_t*>(dk + s * rowK + d) = pack2<T>(accX(i), accX(i + 1));
      });
    }
    if (wantDg) {  // <S_c, dS_{c+1}>
      barrierWait(&sm.loaded[Tiles::kState], 0);
      float part = tileDotPart<T, DK, DV>(tS, tDS, 0, wtid);
      CUTE_UNROLL
      for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
      if ((wtid & 31) == 0) sm.dot[wtid / 32] = part;
    }
  } else {
    waitFor(Tiles::kStateGradient);
    typename Tiles::MmaKdS mma;
    auto thr = mma.get_thread_slice(wtid);
    Tensor acc = partition_fragment_C(mma, Shape<Int<C>, Int<DV>>{});
    issue(acc);
    gemm<true>(mma, thr.partition_fragment_A(tK.tensor()(_, _, 0)),
               thr.partition_fragment_B(tDSt.tensor()(_, _, 0)), acc);
    commitAndWait(acc);
    const auto cV = accCoords<C, DV>(mma);
    forEachPair<typename Tiles::MmaKdS>(cV, [&](int i, int s, int) {
      const float f = Decay::kActive ? __expf(bLast - decayAt(s)) : 1.f;
      acc(i) *= f;
      acc(i + 1) *= f;
    });
    typename Tiles::MmaAtO mma2;
    auto thr2 = mma2.get_thread_slice(wtid);
    issue(acc);
    gemm<false>(mma2, thr2.partition_fragment_A(tAt.tensor()(_, _, 0)),
                thr2.partition_fragment_B(tOt.tensor()(_, _, 0)), acc);
    commitAndWait(acc);
    if (p.dv) {
      T* dv = static_cast<T*>(p.dv) + tok0 * rowV + int64_t(h) * DV;
      forEachPair<typename Tiles::MmaKdS>(cV, [&](int i, int s, int c) {
        if (s < rows) *reinterpret_cast<uint32_t*>(dv + s * rowV + c) = pack2<T>(acc(i), acc(i + 1));
      });
    }
    if (wantDg) keepPairTerms<MmaQK, Tiles::kLdE>(cC, accPm, sm.e);
  }
  if (!wantDg) return;
  __syncthreads();

  // Phase 3 (scalar decay, dg wanted): dg from its terms, a thread per token
  const float dg = chunkDecayGrad<C, Tiles::kLdE>(sm.e, sm.r2, sm.r3, sm.dot, bLast, rows);
  if (tid < rows) p.dg[(tok0 + tid) * H + h] = dg;
}

}  // namespace linac::kernels::cuda::hopper
