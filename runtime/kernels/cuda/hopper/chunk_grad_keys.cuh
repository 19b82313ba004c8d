// Hopper backward of the additive rule (decay none / fixed / scalar, inclusive readout) for heads
// wider than chunk_grad.cuh's one-CTA tile (dk 256: issue 11's D256 shape), the key stage.
// chunk_grad.cuh holds a chunk's dk x dv states in one CTA (dk, dv <= 128); at dk = dv = 256 the
// two states alone would take 256 KB of shared memory. Every term of its formulas is a sum over key
// channels or over value columns, so the work splits in two kernels:
//   key stage (this file): one CTA of three warpgroups per (chunk slot, head, block of KB = 128 key
//   channels [kb]), walking the value columns in blocks of VB = 64 through a two-stage pipeline
//   of tensor-map copies (v, dO and the key block's rows of S_c, dS_{c+1}), with b the chunk's
//   cumulative log-decay (chunk_decay.cuh) and s <= t:
//     D  = scale exp(b_t - b_s) (dO V^T)[t][s]                 (dO V^T summed over value blocks)
//     dq = scale diag(exp b) dO S_c[kb]^T + D K[kb]              warpgroup 0 (and D)
//     dk = diag(exp(b_last - b)) V dS_{c+1}[kb]^T + D^T Q[kb]    warpgroup 1
//   and, for a scalar decay, the key block's share of chunk_grad.cuh's dg (each of its terms, the
//   state product <S_c, dS_{c+1}>, q.dq_inter, k.dk_inter and D . (Q K^T), is a sum over key
//   channels): written to dg itself with one key block, else to the block's fp32 plane;
//   value stage (chunk_grad_values.cuh): dv, and dg as the sum of the planes.
// D costs a second dO V^T per extra key block (K = dv, small beside the states' products). Every
// output element belongs to one CTA: deterministic, no atomics.
// Shared memory: q, k 32 KB, two stages of v, dO (32 KB) and of the state rows (64 KB), D, its
// fp32 copy and the dg sums: ~155 KB, one CTA a SM, as chunk_grad.cuh.
#pragma once

#include "../chunk_slots.cuh"
#include "backward_params.h"
#include "chunk_decay.cuh"
#include "chunk_grad.cuh"
#include "tiles.cuh"
#include "tma.cuh"

namespace linac::kernels::cuda::hopper {

template <class T>
struct ChunkGradKeyTiles {
  static constexpr int C = kChunk, KB = kGradKeyBlock, VB = kGradValueBlock, kStages = 2;
  using Qk = RowTile<T, C, KB>;              // q, k: [t, d], the key block's channels
  using QkT = Transposed<Qk, C, KB>;         // (d, t)
  using Vo = RowTile<T, C, VB, kStages>;     // v, d_o: [t, v], one value block a stage
  using St = RowTile<T, KB, VB, kStages>;    // S_c, dS_{c+1}: [d, v], the key block's rows
  using Sq = RowTile<T, C, C>;               // D: [t, s]
  using SqT = Transposed<Sq, C, C>;          // (s, t)

  using MmaQK = WarpgroupMma<T, C, C, KB, GMMA::Major::K, GMMA::Major::K>;     // Q K^T (the block's share)
  using MmaOV = WarpgroupMma<T, C, C, VB, GMMA::Major::K, GMMA::Major::K>;     // dO V^T
  using MmaXS = WarpgroupMma<T, C, KB, VB, GMMA::Major::K, GMMA::Major::K>;    // dO S^T, V dS^T
  using MmaDK = WarpgroupMma<T, C, KB, C, GMMA::Major::K, GMMA::Major::MN>;    // D K
  using MmaDtQ = WarpgroupMma<T, C, KB, C, GMMA::Major::MN, GMMA::Major::MN>;  // D^T Q

  // Tensor maps (tma.cuh): q, k, v, d_o as (64, 1, C, 1) boxes of [sequences, tokens, H, width];
  // S_c, dS_{c+1} as (64, KB) boxes of their [slots H dk, dv] rows.
  struct Maps {
    CUtensorMap q, k, v, d_o, s, ds;
  };

  static constexpr int kLdE = C + 4;
  struct Smem {
    alignas(1024) T q[cosize_v<Qk>];
    alignas(1024) T k[cosize_v<Qk>];
    alignas(1024) T v[cosize_v<Vo>];
    alignas(1024) T o[cosize_v<Vo>];
    alignas(1024) T s[cosize_v<St>];
    alignas(1024) T ds[cosize_v<St>];
    alignas(1024) T d[cosize_v<Sq>];
    alignas(16) float e[C * kLdE];  // D (fp32), then D . (Q K^T), then its row prefix sums
    float g[C];
    float b[C];
    float r2[C];  // q_t . dq_inter_t over the block's channels
    float r3[C];  // k_s . dk_inter_s
    float dot[kWarpgroupThreads / 32];  // <S_c, dS_{c+1}> over the block's rows, per warp
    uint64_t chunkLoaded;               // q, k and g
    uint64_t blockLoaded[kStages];      // a stage's v, d_o, S_c and dS_{c+1} rows
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, class Decay>
__global__ void __launch_bounds__(kGradThreads, 1)
    chunkGradKeysKernel(const BackwardParams p, const __grid_constant__ typename ChunkGradKeyTiles<T>::Maps maps) {
  using Tiles = ChunkGradKeyTiles<T>;
  constexpr int C = Tiles::C, KB = Tiles::KB, VB = Tiles::VB;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, wg = tid / kWarpgroupThreads, wtid = tid % kWarpgroupThreads;
  const int h = blockIdx.y, H = p.heads, DK = p.key_dim, d0 = int(blockIdx.z) * KB;
  const int valueBlocks = p.value_dim / VB;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowK = int64_t(H) * DK;
  const bool wantDg = Decay::kClass == DecayClass::Scalar && p.dg != nullptr;
  const bool partial = p.cu_seqlens != nullptr && rows < C;  // the boxes run into the next sequence

  const auto tQ = smemTile(sm.q, typename Tiles::Qk{});
  const auto tQt = smemTile(sm.q, typename Tiles::QkT{});
  const auto tK = smemTile(sm.k, typename Tiles::Qk{});
  const auto tKt = smemTile(sm.k, typename Tiles::QkT{});
  const auto tV = smemTile(sm.v, typename Tiles::Vo{});
  const auto tO = smemTile(sm.o, typename Tiles::Vo{});
  const auto tS = smemTile(sm.s, typename Tiles::St{});
  const auto tDS = smemTile(sm.ds, typename Tiles::St{});
  const auto tD = smemTile(sm.d, typename Tiles::Sq{});
  const auto tDt = smemTile(sm.d, typename Tiles::SqT{});

  const auto origin = tokenMapOrigin<C>(p, n, bos);
  const int mapToken = origin.chunk(chunk), mapSeq = origin.seq;  // this chunk in the maps
  const int stateRow = int(((coff + chunk) * H + h) * DK) + d0;   // the block's first row of S_c
  // Value block j into stage j % 2: thread 0 announces and issues the boxes, every thread arrives.
  auto loadBlock = [&](int j) {
    uint64_t* bar = &sm.blockLoaded[j % Tiles::kStages];
    const int stage = j % Tiles::kStages, v0 = j * VB;
    if (tid == 0) {
      barrierExpectBytes(bar, 2 * (C + KB) * VB * sizeof(T));
      bulkLoadTile4d<false, C, VB>(tV, stage, &maps.v, v0, h, mapToken, mapSeq, bar);
      bulkLoadTile4d<false, C, VB>(tO, stage, &maps.d_o, v0, h, mapToken, mapSeq, bar);
      bulkLoadTile2d<false, KB, VB>(tS, stage, &maps.s, v0, stateRow, bar);
      bulkLoadTile2d<false, KB, VB>(tDS, stage, &maps.ds, v0, stateRow, bar);
    }
    copyArrive(bar);
  };
  if (tid == 0) {
    barrierInit(&sm.chunkLoaded, kGradThreads);
    for (int stage = 0; stage < Tiles::kStages; ++stage) barrierInit(&sm.blockLoaded[stage], kGradThreads);
  }
  __syncthreads();  // the mbarriers exist before any thread arrives
  if (tid == 0) {
    barrierExpectBytes(&sm.chunkLoaded, 2 * C * KB * sizeof(T));
    bulkLoadTile4d<false, C, KB>(tQ, 0, &maps.q, d0, h, mapToken, mapSeq, &sm.chunkLoaded);
    bulkLoadTile4d<false, C, KB>(tK, 0, &maps.k, d0, h, mapToken, mapSeq, &sm.chunkLoaded);
  }
  stageLogDecay<Decay>(sm.g, p.g, tok0, rows, h, H);
  copyArrive(&sm.chunkLoaded);
  for (int j = 0; j < Tiles::kStages && j < valueBlocks; ++j) loadBlock(j);

  barrierWait(&sm.chunkLoaded, 0);
  if (partial) {
    zeroRows<false, C, KB, kGradThreads>(tQ, 0, rows);
    zeroRows<false, C, KB, kGradThreads>(tK, 0, rows);
  }
  if constexpr (Decay::kActive) {
    if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g, p.g, rows, h);
  }
  fenceToAsyncProxy();
  __syncthreads();  // the zeroed rows and b before any product or factor reads them
  auto decayAt = [&](int t) { return Decay::kActive ? sm.b[t] : 0.f; };
  const float bLast = decayAt(C - 1);

  typename Tiles::MmaXS mmaXS;
  Tensor accX = partition_fragment_C(mmaXS, Shape<Int<C>, Int<KB>>{});  // dq (wg 0) or dk (wg 1)
  const auto cX = accCoords<C, KB>(mmaXS);
  typename Tiles::MmaOV mmaOV;
  Tensor accD = partition_fragment_C(mmaOV, Shape<Int<C>, Int<C>>{});   // dO V^T (wg 0)
  typename Tiles::MmaQK mmaQK;
  Tensor accPm = partition_fragment_C(mmaQK, Shape<Int<C>, Int<C>>{});  // Q K^T (wg 2)
  const auto cC = accCoords<C, C>(mmaQK);
  float dot = 0.f;  // <S_c, dS_{c+1}> over this thread's share of the block's rows (wg 2)
  // the sums over value blocks accumulate from zero (no branch between a product's issue and commit)
  clear(accX);
  clear(accD);

  // Phase 1, one value block a step: dO V^T and dO S_c^T (wg 0), V dS_{c+1}^T (1), Q K^T once and
  // the state product (2).
  for (int j = 0; j < valueBlocks; ++j) {
    const int stage = j % Tiles::kStages;
    barrierWait(&sm.blockLoaded[stage], uint32_t(j / Tiles::kStages) & 1u);
    if (partial) {
      zeroRows<false, C, VB, kGradThreads>(tV, stage, rows);
      zeroRows<false, C, VB, kGradThreads>(tO, stage, rows);
      fenceToAsyncProxy();
      __syncthreads();  // every thread's zeroes before a product reads the stage
    }
    if (wg == 0) {
      auto thr = mmaOV.get_thread_slice(wtid);
      auto thrX = mmaXS.get_thread_slice(wtid);
      issue(accD, accX);
      gemm<false>(mmaOV, thr.partition_fragment_A(tO.tensor()(_, _, stage)),
                  thr.partition_fragment_B(tV.tensor()(_, _, stage)), accD);
      gemm<false>(mmaXS, thrX.partition_fragment_A(tO.tensor()(_, _, stage)),
                  thrX.partition_fragment_B(tS.tensor()(_, _, stage)), accX);
      commitAndWait(accD, accX);
    } else if (wg == 1) {
      auto thr = mmaXS.get_thread_slice(wtid);
      issue(accX);
      gemm<false>(mmaXS, thr.partition_fragment_A(tV.tensor()(_, _, stage)),
                  thr.partition_fragment_B(tDS.tensor()(_, _, stage)), accX);
      commitAndWait(accX);
    } else {
      if (j == 0) {
        auto thr = mmaQK.get_thread_slice(wtid);
        issue(accPm);
        gemm<true>(mmaQK, thr.partition_fragment_A(tQ.tensor()(_, _, 0)),
                   thr.partition_fragment_B(tK.tensor()(_, _, 0)), accPm);
        commitAndWait(accPm);
      }
      if (wantDg) dot += tileDotPart<T, KB, VB>(tS, tDS, stage, wtid);
    }
    __syncthreads();  // every product is done with the stage
    if (j + Tiles::kStages < valueBlocks) loadBlock(j + Tiles::kStages);
  }

  // The block sums' factors: D masked and decayed (wg 0, into tD and e), the inter-chunk rows of
  // dq (0) and dk (1) and their row dots for dg, the state product's warp sums (2).
  auto rowDots = [&](const auto& tile, float* out) { accRowDots<typename Tiles::MmaXS>(cX, accX, tile, 0, out); };
  if (wg == 0) {
    forEachPair<typename Tiles::MmaOV>(accCoords<C, C>(mmaOV), [&](int i, int t, int s) {
      const float2 d = maskedScores<Decay>(accD(i), accD(i + 1), t, s, sm.b, p.scale);
      sts32(tD.at(t, s), pack2<T>(d.x, d.y));
      *reinterpret_cast<float2*>(&sm.e[t * Tiles::kLdE + s]) = d;
    });
    forEachPair<typename Tiles::MmaXS>(cX, [&](int i, int t, int) {
      const float f = Decay::kActive ? p.scale * __expf(decayAt(t)) : p.scale;
      accX(i) *= f;
      accX(i + 1) *= f;
    });
    if (wantDg) rowDots(tQ, sm.r2);
  } else if (wg == 1) {
    forEachPair<typename Tiles::MmaXS>(cX, [&](int i, int s, int) {
      const float f = Decay::kActive ? __expf(bLast - decayAt(s)) : 1.f;
      accX(i) *= f;
      accX(i + 1) *= f;
    });
    if (wantDg) rowDots(tK, sm.r3);
  } else if (wantDg) {
    CUTE_UNROLL
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if ((wtid & 31) == 0) sm.dot[wtid / 32] = dot;
  }
  fenceToAsyncProxy();
  __syncthreads();

  // Phase 2: dq (0), dk (1), the pair terms of dg (2).
  if (wg == 0) {
    typename Tiles::MmaDK mma;
    auto thr = mma.get_thread_slice(wtid);
    issue(accX);
    gemm<false>(mma, thr.partition_fragment_A(tD.tensor()(_, _, 0)), thr.partition_fragment_B(tKt.tensor()(_, _, 0)),
                accX);
    commitAndWait(accX);
    if (p.dq) {
      T* dq = static_cast<T*>(p.dq) + tok0 * rowK + int64_t(h) * DK + d0;
      forEachPair<typename Tiles::MmaXS>(cX, [&](int i, int t, int d) {
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
      T* dk = static_cast<T*>(p.dk) + tok0 * rowK + int64_t(h) * DK + d0;
      forEachPair<typename Tiles::MmaXS>(cX, [&](int i, int s, int d) {
        if (s < rows) *reinterpret_cast<uint32_t*>(dk + s * rowK + d) = pack2<T>(accX(i), accX(i + 1));
      });
    }
  } else if (wantDg) {  // the pair terms over the block's channels
    keepPairTerms<typename Tiles::MmaQK, Tiles::kLdE>(cC, accPm, sm.e);
  }
  if (!wantDg) return;
  __syncthreads();

  // Phase 3 (scalar decay, dg wanted): the block's share of dg, a thread per token
  const float share = chunkDecayGrad<C, Tiles::kLdE>(sm.e, sm.r2, sm.r3, sm.dot, bLast, rows);
  if (tid < rows) {
    const int64_t at = (tok0 + tid) * H + h;
    if (gridDim.z == 1) p.dg[at] = share;
    else p.dg_part[int64_t(blockIdx.z) * p.dg_plane + at] = share;
  }
}

}  // namespace linac::kernels::cuda::hopper
