// Hopper forward of the additive rule (decay none / fixed / scalar) in segments, fused form: the
// correction stage (forward_split.cuh, runSegmentedFusedStages). The fused state-and-output stage
// (state_output.cuh) has run every segment from zero state as a pseudo-sequence of a packed batch
// and written its chunks' outputs O_local; with S_start the state at the segment's start
// (segment_scan.cuh's scan), g_c the log-decay from there to chunk c's start and b the chunk's
// cumulative log-decay, the chunk's true output is
//   O = O_local + scale diag(exp(g_c + b)) Q S_start[:, vb]                            [C, VB]
// (the state before chunk c is S_c^local + exp(g_c) S_start, and the fused stage formed
// scale diag(exp(b)) Q S_c^local). One warpgroup per (chunk slot, head, block of VB = 64 value
// columns): q and S_start's columns by tensor-map copies (tma.cuh) on one mbarrier, g by cp.async,
// Q S_start on wgmma, O read, corrected and written in the input dtype (so rounded twice where a
// start is not zero). The slots of a sequence's first segment exit at once without h0 (its start
// is zero).
#pragma once

#include "../chunk_slots.cuh"
#include "chunk_decay.cuh"
#include "chunk_output.cuh"
#include "forward_params.h"
#include "tiles.cuh"
#include "tma.cuh"

namespace linac::kernels::cuda::hopper {

template <class T, int DK>
struct SegmentCorrectTiles {
  static constexpr int C = kChunk, VB = kOutputValueBlock;
  using Qk = RowTile<T, C, DK>;        // q: [t, d]
  using St = RowTile<T, DK, VB>;       // S_start: [d, v], the value block's columns
  using StT = Transposed<St, DK, VB>;  // (v, d)
  using Mma = WarpgroupMma<T, C, VB, DK, GMMA::Major::K, GMMA::Major::MN>;  // Q S_start

  // Tensor maps (tma.cuh): q as (width, heads, tokens, sequences) boxes of one chunk; S_start as
  // (VB, DK) boxes of the segments' [segments H dk, dv] rows.
  struct Maps {
    CUtensorMap q, start;
  };

  struct Smem {
    alignas(1024) T q[cosize_v<Qk>];
    alignas(1024) T start[cosize_v<St>];
    float g[C];
    float b[C];
    uint64_t loaded;  // q and S_start
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

/// p: the pseudo-sequences (cu_seqlens, num_seqs = sequences x segments), p.o holding O_local;
/// chunkStart: [slots, H] g_c of each chunk slot (segmentDecayKernel); fromH0: the first segments
/// start from h0 (else from zero, and take no correction).
template <class T, int DK, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads)
    segmentCorrectKernel(const ForwardParams p, int segments, bool fromH0, const float* chunkStart,
                         const __grid_constant__ typename SegmentCorrectTiles<T, DK>::Maps maps) {
  using Tiles = SegmentCorrectTiles<T, DK>;
  using Mma = typename Tiles::Mma;
  constexpr int C = Tiles::C, VB = Tiles::VB;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  if (n % segments == 0 && !fromH0) return;  // a first segment from zero: O_local is the output
  const int tid = threadIdx.x, h = blockIdx.y, H = p.heads, v0 = int(blockIdx.z) * VB;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowV = int64_t(H) * p.value_dim;

  const auto tQ = smemTile(sm.q, typename Tiles::Qk{});
  const auto tStart = smemTile(sm.start, typename Tiles::StT{});
  if (tid == 0) barrierInit(&sm.loaded, kWarpgroupThreads);
  __syncthreads();  // the mbarrier exists before any thread arrives
  if (tid == 0) {
    const auto origin = tokenMapOrigin<C>(p, n, bos);
    barrierExpectBytes(&sm.loaded, (C * DK + DK * VB) * sizeof(T));
    bulkLoadTile4d<false, C, DK>(tQ, 0, &maps.q, 0, h, origin.chunk(chunk), origin.seq, &sm.loaded);
    bulkLoadTile2d<false, DK, VB>(smemTile(sm.start, typename Tiles::St{}), 0, &maps.start, v0,
                                  int((int64_t(n) * H + h) * DK), &sm.loaded);
  }
  stageLogDecay<Decay>(sm.g, p.g, tok0, rows, h, H);
  copyArrive(&sm.loaded);
  barrierWait(&sm.loaded, 0);
  if constexpr (Decay::kActive) {
    if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g, p.g, rows, h);
  }
  __syncthreads();  // b before any factor reads it

  // Q rows past a packed sequence's end (the box ran into the next one's tokens) only reach
  // output rows that are not written.
  Mma mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor acc = partition_fragment_C(mma, Shape<Int<C>, Int<VB>>{});
  issue(acc);
  gemm<true>(mma, thr.partition_fragment_A(tQ.tensor()(_, _, 0)), thr.partition_fragment_B(tStart.tensor()(_, _, 0)),
             acc);
  commitAndWait(acc);

  const float f = p.scale * __expf(chunkStart[(coff + chunk) * H + h]);
  T* o = static_cast<T*>(p.o) + tok0 * rowV + int64_t(h) * p.value_dim + v0;
  forEachPair<Mma>(accCoords<C, VB>(mma), [&](int i, int t, int v) {
    if (t >= rows) return;
    const float ft = Decay::kActive ? f * __expf(sm.b[t]) : f;
    uint32_t* at = reinterpret_cast<uint32_t*>(o + t * rowV + v);
    const float2 local = unpack2<T>(*at);
    *at = pack2<T>(local.x + ft * acc(i), local.y + ft * acc(i + 1));
  });
}

}  // namespace linac::kernels::cuda::hopper
