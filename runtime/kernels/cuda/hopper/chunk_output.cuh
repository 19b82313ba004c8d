// Hopper forward of the additive rule (decay none / fixed / scalar), the chunk-parallel output
// stage of the split forward (forward_split.cuh): the state pass (state_scan.cuh, forward
// direction) has written S_c, the state before chunk c, for every chunk slot; here one warpgroup
// per (chunk slot, head, block of VB = 64 value columns [vb]) forms, with b the chunk's cumulative
// log-decay and s <= t,
//   A  = scale exp(b_t - b_s) (Q K^T)[t][s]                                   [C, C]
//   O  = scale diag(exp(b)) Q S_c[:, vb] + A V[:, vb]                          [C, VB]
// the chunk's outputs, as state_output.cuh forms them on its serial chain of chunks. Where that
// chain's grid leaves SMs idle (long sequences with few heads) this split runs the chain with
// K^T V alone and every chunk's output in parallel, as fla's chunk_fwd_h and chunk_fwd_o do.
// kSegmented (segment_scan.cuh): S_c is the state from the segment's start, and the stage adds
// exp(g_c) Q S_start, S_start the state at the segment's start and g_c the log-decay from there
// to the chunk, before the factor scale e^{b_t}.
// q, k, S_c's columns and v arrive by tensor-map copies (tma.cuh) on one mbarrier, g by cp.async;
// A goes over q's bytes once Q K^T and Q S_c have read it. Shared memory at dk 128: ~56 KB, at
// dk 256 ~104 KB (two CTAs a SM).
#pragma once

#include "../chunk_slots.cuh"
#include "chunk_decay.cuh"
#include "forward_params.h"
#include "tiles.cuh"
#include "tma.cuh"

namespace linac::kernels::cuda::hopper {

constexpr int kOutputValueBlock = 64;  // value columns per CTA of the output stage

template <class T, int DK, bool kSegmented = false>
struct ChunkOutputTiles {
  static constexpr int C = kChunk, VB = kOutputValueBlock;
  using Qk = RowTile<T, C, DK>;        // q, k: [t, d]
  using St = RowTile<T, DK, VB>;       // S_c: [d, v], the value block's columns
  using StT = Transposed<St, DK, VB>;  // (v, d)
  using Vs = RowTile<T, C, VB>;        // v: [s, v], the value block's columns
  using VsT = Transposed<Vs, C, VB>;   // (v, s)
  using Sq = RowTile<T, C, C>;         // A: [t, s]

  using MmaQK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;    // Q K^T
  using MmaQS = WarpgroupMma<T, C, VB, DK, GMMA::Major::K, GMMA::Major::MN>;  // Q S_c
  using MmaAV = WarpgroupMma<T, C, VB, C, GMMA::Major::K, GMMA::Major::MN>;   // A V

  // Tensor maps (tma.cuh): q, k, v as (width, heads, tokens, sequences) boxes of one chunk;
  // S_c as (VB, DK) boxes of the states' [slots H dk, dv] rows, S_start (kSegmented) of the
  // segments' [segments H dk, dv] rows.
  struct Maps {
    CUtensorMap q, k, v, s, start;
  };

  struct Smem {
    union {  // q until Q K^T and Q S_c are done, then A
      alignas(1024) T q[cosize_v<Qk>];
      alignas(1024) T a[cosize_v<Sq>];
    };
    alignas(1024) T k[cosize_v<Qk>];
    alignas(1024) T s[cosize_v<St>];
    alignas(1024) T start[kSegmented ? cosize_v<St> : 8];
    alignas(1024) T v[cosize_v<Vs>];
    float g[C];
    float b[C];
    uint64_t loaded;  // q, k, S_c, v and g
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
  static_assert(kSegmented || 2 * (kSmemBytes + kSharedBytesReservedPerCta) <= size_t(kSharedBytesPerSm),
                "two CTAs per SM");
};

/// chunkStart (kSegmented): [slots, H] g_c of each chunk slot (segmentDecayKernel).
template <class T, int DK, class Decay, bool kSegmented = false>
__global__ void __launch_bounds__(kWarpgroupThreads)
    chunkOutputKernel(const ForwardParams p, const float* chunkStart,
                      const __grid_constant__ typename ChunkOutputTiles<T, DK, kSegmented>::Maps maps) {
  using Tiles = ChunkOutputTiles<T, DK, kSegmented>;
  constexpr int C = Tiles::C, VB = Tiles::VB;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, h = blockIdx.y, H = p.heads, v0 = int(blockIdx.z) * VB;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowV = int64_t(H) * p.value_dim;

  const auto tQ = smemTile(sm.q, typename Tiles::Qk{});
  const auto tK = smemTile(sm.k, typename Tiles::Qk{});
  const auto tSt = smemTile(sm.s, typename Tiles::StT{});
  const auto tStart = smemTile(sm.start, typename Tiles::StT{});
  const auto tV = smemTile(sm.v, typename Tiles::Vs{});
  const auto tVt = smemTile(sm.v, typename Tiles::VsT{});
  const auto tA = smemTile(sm.a, typename Tiles::Sq{});

  if (tid == 0) barrierInit(&sm.loaded, kWarpgroupThreads);
  __syncthreads();  // the mbarrier exists before any thread arrives
  if (tid == 0) {
    const auto origin = tokenMapOrigin<C>(p, n, bos);
    const int mapToken = origin.chunk(chunk), mapSeq = origin.seq;
    const int stateRow = int(((coff + chunk) * H + h) * DK);
    barrierExpectBytes(&sm.loaded, (2 * C * DK + (kSegmented ? 2 : 1) * DK * VB + C * VB) * sizeof(T));
    bulkLoadTile4d<false, C, DK>(tQ, 0, &maps.q, 0, h, mapToken, mapSeq, &sm.loaded);
    bulkLoadTile4d<false, C, DK>(tK, 0, &maps.k, 0, h, mapToken, mapSeq, &sm.loaded);
    bulkLoadTile2d<false, DK, VB>(smemTile(sm.s, typename Tiles::St{}), 0, &maps.s, v0, stateRow, &sm.loaded);
    bulkLoadTile4d<false, C, VB>(tV, 0, &maps.v, v0, h, mapToken, mapSeq, &sm.loaded);
    if constexpr (kSegmented)
      bulkLoadTile2d<false, DK, VB>(smemTile(sm.start, typename Tiles::St{}), 0, &maps.start, v0,
                                    int((int64_t(n) * H + h) * DK), &sm.loaded);
  }
  stageLogDecay<Decay>(sm.g, p.g, tok0, rows, h, H);
  copyArrive(&sm.loaded);
  barrierWait(&sm.loaded, 0);
  if (p.cu_seqlens != nullptr && rows < C) {  // the boxes ran into the next sequence's tokens
    zeroRows<false, C, DK, kWarpgroupThreads>(tQ, 0, rows);
    zeroRows<false, C, DK, kWarpgroupThreads>(tK, 0, rows);
    zeroRows<false, C, VB, kWarpgroupThreads>(tV, 0, rows);
  }
  if constexpr (Decay::kActive) {
    if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g, p.g, rows, h);
  }
  fenceToAsyncProxy();
  __syncthreads();  // the zeroed rows and b before any product or factor reads them

  typename Tiles::MmaQK mmaQK;
  typename Tiles::MmaQS mmaQS;
  auto thrQK = mmaQK.get_thread_slice(tid);
  auto thrQS = mmaQS.get_thread_slice(tid);
  Tensor accP = partition_fragment_C(mmaQK, Shape<Int<C>, Int<C>>{});
  Tensor accO = partition_fragment_C(mmaQS, Shape<Int<C>, Int<VB>>{});
  const auto cO = accCoords<C, VB>(mmaQS);
  auto scoresAndState = [&] {  // Q K^T and Q S_c, reading q
    gemm<true>(mmaQK, thrQK.partition_fragment_A(tQ.tensor()(_, _, 0)),
               thrQK.partition_fragment_B(tK.tensor()(_, _, 0)), accP);
    gemm<true>(mmaQS, thrQS.partition_fragment_A(tQ.tensor()(_, _, 0)),
               thrQS.partition_fragment_B(tSt.tensor()(_, _, 0)), accO);
  };
  if constexpr (kSegmented) {  // ... and Q S_start, added as exp(g_c) Q S_start
    Tensor accX = partition_fragment_C(mmaQS, Shape<Int<C>, Int<VB>>{});
    issue(accP, accO, accX);
    scoresAndState();
    gemm<true>(mmaQS, thrQS.partition_fragment_A(tQ.tensor()(_, _, 0)),
               thrQS.partition_fragment_B(tStart.tensor()(_, _, 0)), accX);
    commitAndWait(accP, accO, accX);
    const float f = __expf(chunkStart[(coff + chunk) * H + h]);
    CUTE_UNROLL
    for (int i = 0; i < size(accO); ++i) accO(i) += f * accX(i);
  } else {
    issue(accP, accO);
    scoresAndState();
    commitAndWait(accP, accO);
  }
  __syncthreads();  // every warp's share of both products has read q before A overwrites it
  forEachPair<typename Tiles::MmaQK>(accCoords<C, C>(mmaQK), [&](int i, int t, int s) {
    const float2 a = maskedScores<Decay>(accP(i), accP(i + 1), t, s, sm.b, p.scale);
    sts32(tA.at(t, s), pack2<T>(a.x, a.y));
  });
  forEachPair<typename Tiles::MmaQS>(cO, [&](int i, int t, int) {
    const float f = Decay::kActive ? p.scale * __expf(sm.b[t]) : p.scale;
    accO(i) *= f;
    accO(i + 1) *= f;
  });
  fenceToAsyncProxy();
  __syncthreads();  // A for the tensor cores

  typename Tiles::MmaAV mmaAV;
  auto thrAV = mmaAV.get_thread_slice(tid);
  issue(accO);
  gemm<false>(mmaAV, thrAV.partition_fragment_A(tA.tensor()(_, _, 0)), thrAV.partition_fragment_B(tVt.tensor()(_, _, 0)),
              accO);
  commitAndWait(accO);
  T* o = static_cast<T*>(p.o) + tok0 * rowV + int64_t(h) * p.value_dim + v0;
  forEachPair<typename Tiles::MmaQS>(cO, [&](int i, int t, int v) {
    if (t < rows) *reinterpret_cast<uint32_t*>(o + t * rowV + v) = pack2<T>(accO(i), accO(i + 1));
  });
}

}  // namespace linac::kernels::cuda::hopper
