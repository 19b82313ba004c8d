// Hopper backward of the additive rule at dk 256 (chunk_grad_keys.cuh states the split), the value
// stage: one warpgroup per (chunk slot, head, block of VB = 64 value columns [vb]), with b the
// chunk's cumulative log-decay and s <= t:
//   A  = scale exp(b_t - b_s) (Q K^T)[t][s]                    (K = dk: every key channel)
//   dv = diag(exp(b_last - b)) K dS_{c+1}[:, vb] + A^T dO[:, vb]
// A is formed again by each value block's CTA (64 x 64 x dk, small beside K dS_{c+1}). The CTAs of
// value block 0 also write dg as the sum of the key stage's planes for their chunk (the key stage
// ran before, in stream order). Shared memory at dk 256: q (then A, over it), k 64 KB, dS_{c+1}'s
// columns 32 KB, dO 8 KB: ~105 KB, two CTAs a SM.
#pragma once

#include "chunk_grad_keys.cuh"

namespace linac::kernels::cuda::hopper {

template <class T, int DK>
struct ChunkGradValueTiles {
  static constexpr int C = kChunk, VB = kGradValueBlock;
  using Qk = RowTile<T, C, DK>;           // q, k: [t, d]
  using Vo = RowTile<T, C, VB>;           // d_o: [t, v], the value block's columns
  using VoT = Transposed<Vo, C, VB>;      // (v, t)
  using St = RowTile<T, DK, VB>;          // dS_{c+1}: [d, v], the value block's columns
  using StT = Transposed<St, DK, VB>;     // (v, d)
  using Sq = RowTile<T, C, C>;            // A: [t, s]
  using SqT = Transposed<Sq, C, C>;       // (s, t)

  using MmaQK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;     // Q K^T
  using MmaKdS = WarpgroupMma<T, C, VB, DK, GMMA::Major::K, GMMA::Major::MN>;  // K dS
  using MmaAtO = WarpgroupMma<T, C, VB, C, GMMA::Major::MN, GMMA::Major::MN>;  // A^T dO

  // Tensor maps (tma.cuh): q, k, d_o as (64, 1, C, 1) boxes of [sequences, tokens, H, width];
  // dS_{c+1} as (64, DK) boxes of its [slots H dk, dv] rows.
  struct Maps {
    CUtensorMap q, k, d_o, ds;
  };

  struct Smem {
    union {  // q until Q K^T is done, then A: two CTAs fit an SM
      alignas(1024) T q[cosize_v<Qk>];
      alignas(1024) T a[cosize_v<Sq>];
    };
    alignas(1024) T k[cosize_v<Qk>];
    alignas(1024) T ds[cosize_v<St>];
    alignas(1024) T o[cosize_v<Vo>];
    float g[C];
    float b[C];
    uint64_t loaded;  // q, k, dS_{c+1}, d_o and g
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
  static_assert(2 * (kSmemBytes + kSharedBytesReservedPerCta) <= size_t(kSharedBytesPerSm), "two CTAs per SM");
};

template <class T, int DK, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads)
    chunkGradValuesKernel(const BackwardParams p, const __grid_constant__ typename ChunkGradValueTiles<T, DK>::Maps maps) {
  using Tiles = ChunkGradValueTiles<T, DK>;
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
  const auto tDSt = smemTile(sm.ds, typename Tiles::StT{});
  const auto tO = smemTile(sm.o, typename Tiles::Vo{});
  const auto tOt = smemTile(sm.o, typename Tiles::VoT{});
  const auto tA = smemTile(sm.a, typename Tiles::Sq{});
  const auto tAt = smemTile(sm.a, typename Tiles::SqT{});

  if (tid == 0) barrierInit(&sm.loaded, kWarpgroupThreads);
  __syncthreads();  // the mbarrier exists before any thread arrives
  if (tid == 0) {
    const auto origin = tokenMapOrigin<C>(p, n, bos);
    const int mapToken = origin.chunk(chunk), mapSeq = origin.seq;
    const int stateRow = int(((coff + chunk) * H + h) * DK);
    barrierExpectBytes(&sm.loaded, (2 * C * DK + DK * VB + C * VB) * sizeof(T));
    bulkLoadTile4d<false, C, DK>(tQ, 0, &maps.q, 0, h, mapToken, mapSeq, &sm.loaded);
    bulkLoadTile4d<false, C, DK>(tK, 0, &maps.k, 0, h, mapToken, mapSeq, &sm.loaded);
    bulkLoadTile2d<false, DK, VB>(smemTile(sm.ds, typename Tiles::St{}), 0, &maps.ds, v0, stateRow, &sm.loaded);
    bulkLoadTile4d<false, C, VB>(tO, 0, &maps.d_o, v0, h, mapToken, mapSeq, &sm.loaded);
  }
  stageLogDecay<Decay>(sm.g, p.g, tok0, rows, h, H);
  copyArrive(&sm.loaded);
  barrierWait(&sm.loaded, 0);
  if (p.cu_seqlens != nullptr && rows < C) {  // the boxes ran into the next sequence's tokens
    zeroRows<false, C, DK, kWarpgroupThreads>(tQ, 0, rows);
    zeroRows<false, C, DK, kWarpgroupThreads>(tK, 0, rows);
    zeroRows<false, C, VB, kWarpgroupThreads>(tO, 0, rows);
  }
  if constexpr (Decay::kActive) {
    if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g, p.g, rows, h);
  }
  fenceToAsyncProxy();
  __syncthreads();  // the zeroed rows and b before any product or factor reads them
  auto decayAt = [&](int t) { return Decay::kActive ? sm.b[t] : 0.f; };
  const float bLast = decayAt(C - 1);

  {  // A = scale exp(b_t - b_s) (Q K^T), masked, into tA
    typename Tiles::MmaQK mma;
    auto thr = mma.get_thread_slice(tid);
    Tensor acc = partition_fragment_C(mma, Shape<Int<C>, Int<C>>{});
    issue(acc);
    gemm<true>(mma, thr.partition_fragment_A(tQ.tensor()(_, _, 0)), thr.partition_fragment_B(tK.tensor()(_, _, 0)),
               acc);
    commitAndWait(acc);
    __syncthreads();  // every warp's share of Q K^T has read q before A overwrites it
    forEachPair<typename Tiles::MmaQK>(accCoords<C, C>(mma), [&](int i, int t, int s) {
      const float2 a = maskedScores<Decay>(acc(i), acc(i + 1), t, s, sm.b, p.scale);
      sts32(tA.at(t, s), pack2<T>(a.x, a.y));
    });
  }
  fenceToAsyncProxy();
  __syncthreads();  // A for the tensor cores

  typename Tiles::MmaKdS mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor acc = partition_fragment_C(mma, Shape<Int<C>, Int<VB>>{});
  const auto cV = accCoords<C, VB>(mma);
  issue(acc);
  gemm<true>(mma, thr.partition_fragment_A(tK.tensor()(_, _, 0)), thr.partition_fragment_B(tDSt.tensor()(_, _, 0)),
             acc);
  commitAndWait(acc);
  forEachPair<typename Tiles::MmaKdS>(cV, [&](int i, int s, int) {
    const float f = Decay::kActive ? __expf(bLast - decayAt(s)) : 1.f;
    acc(i) *= f;
    acc(i + 1) *= f;
  });
  typename Tiles::MmaAtO mma2;
  auto thr2 = mma2.get_thread_slice(tid);
  issue(acc);
  gemm<false>(mma2, thr2.partition_fragment_A(tAt.tensor()(_, _, 0)), thr2.partition_fragment_B(tOt.tensor()(_, _, 0)),
              acc);
  commitAndWait(acc);
  if (p.dv) {
    T* dv = static_cast<T*>(p.dv) + tok0 * rowV + int64_t(h) * p.value_dim + v0;
    forEachPair<typename Tiles::MmaKdS>(cV, [&](int i, int s, int c) {
      if (s < rows) *reinterpret_cast<uint32_t*>(dv + s * rowV + c) = pack2<T>(acc(i), acc(i + 1));
    });
  }
  // dg: the key blocks' shares summed in a fixed order (deterministic)
  if (blockIdx.z == 0 && p.dg_part != nullptr && tid < rows) {
    const int64_t at = (tok0 + tid) * H + h;
    float sum = 0.f;
    for (int kb = 0; kb < DK / kGradKeyBlock; ++kb) sum += p.dg_part[kb * p.dg_plane + at];
    p.dg[at] = sum;
  }
}

}  // namespace linac::kernels::cuda::hopper
