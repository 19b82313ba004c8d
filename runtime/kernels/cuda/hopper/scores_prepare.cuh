// Hopper forward, preparation stage of the additive rule's chunk scores for decay none / fixed /
// scalar (linear attention, RetNet, Mamba-2 / simple GLA): chunk-parallel, one CTA (one
// warpgroup) per (chunk slot, head).
//
// Per chunk of C = 64 tokens (b = cumulative log-decay from the chunk start, chunk_decay.cuh):
//   P[t][s] = scale (q_t . k_s) exp(b_t - b_s) for s <= t, else 0        (Q K^T on wgmma)
// written in the input dtype as [slots, H, C, C], which the state stage (state_output.cuh, with
// the decay WithPreparedScores) loads per chunk as it loads the delta rule's and the diagonal
// decay's P. Without it the state stage forms Q K^T once per value block on its serial chain of
// chunks; with few (sequence, head) pairs and long sequences that chain is the forward's time
// (B2 T16384 H4 D128: 32 CTAs of 256 chunks each), and this stage takes Q K^T off it.
// q and k arrive by tensor-map copies (tma.cuh) issued by thread 0, g by cp.async, on one
// mbarrier; a packed sequence's partial chunk has its rows past the end zeroed after the copy.
#pragma once

#include "../chunk_slots.cuh"
#include "chunk_decay.cuh"
#include "forward_params.h"
#include "tiles.cuh"
#include "tma.cuh"

namespace linac::kernels::cuda::hopper {

template <class T, int DK>
struct ScoresPrepareTiles {
  static constexpr int C = kChunk;
  using Qk = RowTile<T, C, DK>;  // q and k: [t, d]
  using MmaQK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;

  // Tensor maps (tma.cuh): q, k as (width, heads, tokens, sequences), boxes of one chunk
  struct Maps {
    CUtensorMap q, k;
  };

  struct Smem {
    alignas(1024) T q[cosize_v<Qk>];
    alignas(1024) T k[cosize_v<Qk>];
    float g[C];
    float b[C];
    uint64_t loaded;  // q, k, g have landed
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
  // CTAs a SM: as many as shared memory allows, up to four (each CTA is one dependent sequence
  // of a copy, a product and a store; more of them keep more copies in flight)
  static constexpr int kSmemFit = kSharedBytesPerSm / int(kSmemBytes + kSharedBytesReservedPerCta);
  static constexpr int kMinBlocks = kSmemFit < 4 ? kSmemFit : 4;
};

template <class T, int DK, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads, ScoresPrepareTiles<T, DK>::kMinBlocks)
    scoresPrepareKernel(const ForwardParams p, void* scores /* [slots, H, C, C] */,
                        const __grid_constant__ typename ScoresPrepareTiles<T, DK>::Maps maps) {
  using Tiles = ScoresPrepareTiles<T, DK>;
  using MmaQK = typename Tiles::MmaQK;
  constexpr int C = Tiles::C;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk;
  const int64_t slot = blockIdx.x;
  if (!slotToChunk<C>(p, slot, n, bos, len, chunk)) return;
  const int tid = threadIdx.x, h = blockIdx.y, H = p.heads;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);

  const auto tQ = smemTile(sm.q, typename Tiles::Qk{});  // (C, DK)
  const auto tK = smemTile(sm.k, typename Tiles::Qk{});  // (C, DK)
  const auto origin = tokenMapOrigin<C>(p, n, bos);  // a packed batch is one sequence of all its tokens
  if (tid == 0) barrierInit(&sm.loaded, kWarpgroupThreads);
  __syncthreads();  // the mbarrier exists before any thread arrives
  if (tid == 0) {
    barrierExpectBytes(&sm.loaded, 2 * C * DK * sizeof(T));
    bulkLoadTile4d<false, C, DK>(tQ, 0, &maps.q, 0, h, origin.chunk(chunk), origin.seq, &sm.loaded);
    bulkLoadTile4d<false, C, DK>(tK, 0, &maps.k, 0, h, origin.chunk(chunk), origin.seq, &sm.loaded);
  }
  stageLogDecay<Decay>(sm.g, p.g, tok0, rows, h, H);
  copyArrive(&sm.loaded);
  barrierWait(&sm.loaded, 0);
  if (p.cu_seqlens != nullptr && rows < C) {  // the boxes ran into the next sequence
    zeroRows<false, C, DK, kWarpgroupThreads>(tQ, 0, rows);
    zeroRows<false, C, DK, kWarpgroupThreads>(tK, 0, rows);
  }
  fenceToAsyncProxy();
  __syncthreads();

  if constexpr (Decay::kActive) {
    if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g, p.g, rows, h);
  }
  MmaQK mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor accP = partition_fragment_C(mma, Shape<Int<C>, Int<C>>{});
  issue(accP);
  gemm<true>(mma, thr.partition_fragment_A(tQ.tensor()(_, _, 0)), thr.partition_fragment_B(tK.tensor()(_, _, 0)),
             accP);
  commitAndWait(accP);
  if constexpr (Decay::kActive) __syncthreads();  // sm.b

  T* pChunk = static_cast<T*>(scores) + (slot * H + h) * int64_t(C) * C;  // [C, C]
  forEachPair<MmaQK>(accCoords<C, C>(mma), [&](int i, int t, int s) {
    const float2 ps = maskedScores<Decay>(accP(i), accP(i + 1), t, s, sm.b, p.scale);
    *reinterpret_cast<uint32_t*>(pChunk + t * C + s) = pack2<T>(ps.x, ps.y);
  });
}

}  // namespace linac::kernels::cuda::hopper
