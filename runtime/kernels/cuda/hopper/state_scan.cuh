// Hopper backward, state passes of the additive rule (decay none / fixed / scalar): the states the
// chunk-parallel gradients need, in the input dtype, one row of the workspace per chunk slot.
// One CTA (one warpgroup) per (block of BV value columns, head, sequence), one launch per direction
// (stateScanKernel), or both directions in one launch (stateScanJointKernel, grid z = 2N, with
// p.joint_state_passes: twice the CTAs where one direction's grid leaves SMs idle):
//   forward:  S = h0;    per chunk c = 0, 1, ...:      states[c]  = S,
//             S <- exp(b_last) S + K^T (diag(exp(b_last - b)) V);          ht = S at the end
//   reverse:  dS = d_ht; per chunk c = last, ..., 0:   dstates[c] = dS,
//             dS <- exp(b_last) dS + Q^T (diag(scale exp(b)) dO);          d_h0 = dS at the end
// so states[c] is S_c, the state before chunk c, and dstates[c] is dS_{c+1}, the gradient with
// respect to the state after it. Both directions are one product per chunk, X^T Y with X = k or q
// read through the transposed view of its [t, d] tile and Y = v or d_o scaled per token, the fp32
// state as its accumulator (the state stage of the forward, state_output.cuh, without the output).
// X and Y arrive by tensor-map copies (tma.cuh) one chunk ahead, g by cp.async, on the stage's
// mbarrier.
#pragma once

#include "../chunk_slots.cuh"
#include "../cuda_check.h"
#include "backward_params.h"
#include "chunk_decay.cuh"
#include "tiles.cuh"
#include "tma.cuh"

namespace linac::kernels::cuda::hopper {

constexpr int kScanValueBlock = 32;  // value columns per CTA of the state passes (16 on small grids)

template <class T, int DK, int BV>
struct StateScanTiles {
  static constexpr int C = kChunk;
  using X = RowTile<T, C, DK, 2>;            // k or q: [t, d], two stages
  using Xt = Transposed<X, C, DK, 2>;       // (d, t)
  using Y = ColTile<T, BV, C, 2>;            // v or d_o: (v, t), two stages
  using Ys = ColTile<T, BV, C>;              // Y scaled per token
  using Mma = WarpgroupMma<T, DK, BV, C, GMMA::Major::MN, GMMA::Major::MN>;

  // One pass's tensor maps: x (k or q) as (DK, 1, C, 1) boxes of [tokens, H, dk], y (v or d_o)
  // as (BV, 1, C, 1) of [tokens, H, dv], each (width, heads, tokens, sequences).
  struct Maps {
    CUtensorMap x, y;
  };

  struct Smem {
    alignas(1024) T x[cosize_v<X>];
    alignas(1024) T y[cosize_v<Y>];
    alignas(1024) T ys[cosize_v<Ys>];
    float g[2][C];
    float b[C];
    uint64_t loaded[2];  // a stage's copies have landed
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

/// acc <- the [DK, BV] block (rows d, columns v) of an fp32 state row-major with DV columns at
/// `block` (zeros when it is null): h0 or d_ht at the start of a state pass.
template <class Mma, class Acc, class Coords>
__device__ void loadStateBlock(Acc& acc, const Coords& coords, const float* block, int DV) {
  forEachPair<Mma>(coords, [&](int i, int d, int v) {
    const float* s0 = block + int64_t(d) * DV + v;
    acc(i) = block ? s0[0] : 0.f;
    acc(i + 1) = block ? s0[1] : 0.f;
  });
}

/// The [DK, BV] fp32 accumulator into such a block: d_h0 at the end of a reverse pass.
template <class Mma, class Acc, class Coords>
__device__ void storeStateBlock(const Acc& acc, const Coords& coords, float* block, int DV) {
  forEachPair<Mma>(coords, [&](int i, int d, int v) {
    *reinterpret_cast<float2*>(block + int64_t(d) * DV + v) = make_float2(acc(i), acc(i + 1));
  });
}

/// One direction's pass over sequence n (maps: a kernel parameter, read by the tensor-map copies).
template <class T, int DK, int BV, class Decay, bool kReverse>
__device__ __forceinline__ void stateScanPass(const BackwardParams& p, const typename StateScanTiles<T, DK, BV>::Maps& maps,
                                              int n) {
  using Tiles = StateScanTiles<T, DK, BV>;
  using Mma = typename Tiles::Mma;
  constexpr int C = Tiles::C;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  const int tid = threadIdx.x;
  constexpr bool reverse = kReverse;
  const int h = blockIdx.y, H = p.heads, DV = p.value_dim, v0 = blockIdx.x * BV;
  int64_t bos, len, coff;
  seqInfo<C>(p, n, bos, len, coff);
  const int numChunks = int((len + C - 1) / C);

  T* out = static_cast<T*>(reverse ? p.dstates : p.states);   // [slots, H, dk, dv]

  const auto tX = smemTile(sm.x, typename Tiles::X{});
  const auto tXt = smemTile(sm.x, typename Tiles::Xt{});
  const auto tY = smemTile(sm.y, typename Tiles::Y{});
  const auto tYs = smemTile(sm.ys, typename Tiles::Ys{});

  Mma mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor fXt = thr.partition_fragment_A(tXt.tensor());  // (MMA, M, K, stage)
  Tensor fY = thr.partition_fragment_B(tY.tensor());
  Tensor fYs = thr.partition_fragment_B(tYs.tensor()(_, _, 0));
  Tensor acc = partition_fragment_C(mma, Shape<Int<DK>, Int<BV>>{});
  const auto cS = accCoords<DK, BV>(mma);

  const int64_t stateOffset = (int64_t(n) * H + h) * DK * DV + v0;  // [N, H, dk, dv]
  const float* init = reverse ? p.d_ht : p.h0;
  loadStateBlock<Mma>(acc, cS, init ? init + stateOffset : nullptr, DV);

  auto chunkOf = [&](int i) { return reverse ? numChunks - 1 - i : i; };
  auto rowsOf = [&](int c) { return int(len - int64_t(c) * C < C ? len - int64_t(c) * C : C); };
  const auto origin = tokenMapOrigin<C>(p, n, bos);  // chunk c at (origin.chunk(c), origin.seq) of the maps
  // Thread 0 announces and issues the boxes; every thread arrives once its g copy has landed.
  auto loadChunk = [&](int c, int stage) {
    uint64_t* bar = &sm.loaded[stage];
    if (tid == 0)
      bulkLoadKeyValueChunk<C, DK, BV>(tX, tY, stage, &maps.x, &maps.y, v0, h, origin.chunk(c), origin.seq, bar);
    stageLogDecay<Decay>(sm.g[stage], p.g, bos + int64_t(c) * C, rowsOf(c), h, H);
    copyArrive(bar);
  };
  if (tid == 0) {
    barrierInit(&sm.loaded[0], kWarpgroupThreads);
    barrierInit(&sm.loaded[1], kWarpgroupThreads);
  }
  __syncthreads();  // the mbarriers exist before any thread arrives
  if (numChunks > 0) loadChunk(chunkOf(0), 0);

  for (int i = 0; i < numChunks; ++i) {
    const int stage = i & 1, c = chunkOf(i);
    barrierWait(&sm.loaded[stage], uint32_t(i >> 1) & 1u);  // the stage's (i / 2)-th fill
    if (p.cu_seqlens != nullptr && rowsOf(c) < C) {  // a packed batch's boxes ran into the next sequence
      zeroRows<false, C, DK, kWarpgroupThreads>(tX, stage, rowsOf(c));
      zeroRows<true, C, BV, kWarpgroupThreads>(tY, stage, rowsOf(c));
    }
    fenceToAsyncProxy();
    __syncthreads();
    if (i + 1 < numChunks) loadChunk(chunkOf(i + 1), stage ^ 1);
    if constexpr (Decay::kActive) {
      if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g[stage], p.g, rowsOf(c), h);
    }
    // The state at this point is S_c (forward) or dS_{c+1} (reverse).
    T* slot = out + ((coff + c) * H + h) * int64_t(DK) * DV + v0;
    forEachPair<Mma>(cS, [&](int e, int d, int v) {
      *reinterpret_cast<uint32_t*>(slot + int64_t(d) * DV + v) = pack2<T>(acc(e), acc(e + 1));
    });
    constexpr bool scaled = Decay::kActive || reverse;  // forward without decay multiplies by 1
    if constexpr (scaled) {
      if constexpr (Decay::kActive) __syncthreads();  // sm.b
      const float bLast = Decay::kActive ? sm.b[C - 1] : 0.f;
      constexpr int kVecs = BV * C / 8;
      static_assert(kVecs % kWarpgroupThreads == 0, "whole vectors per thread");
      CUTE_UNROLL
      for (int e = 0; e < kVecs / kWarpgroupThreads; ++e) {
        const int idx = tid + e * kWarpgroupThreads;
        const int t = idx / (BV / 8), v = (idx % (BV / 8)) * 8;
        const float bt = Decay::kActive ? sm.b[t] : 0.f;
        const float f = reverse ? p.scale * __expf(bt) : __expf(bLast - bt);
        uint4 w = lds128(tY.at(v, t, stage));
        uint32_t* words = reinterpret_cast<uint32_t*>(&w);
        CUTE_UNROLL
        for (int j = 0; j < 4; ++j) {
          const float2 pair = unpack2<T>(words[j]);
          words[j] = pack2<T>(pair.x * f, pair.y * f);
        }
        sts128(tYs.at(v, t), w);
      }
      if constexpr (Decay::kActive) {
        const float fLast = __expf(bLast);
        CUTE_UNROLL
        for (int e = 0; e < size(acc); ++e) acc(e) *= fLast;
      }
      fenceToAsyncProxy();
      __syncthreads();
    }
    issue(acc);
    if constexpr (scaled) gemm<false>(mma, fXt(_, _, _, stage), fYs, acc);
    else gemm<false>(mma, fXt(_, _, _, stage), fY(_, _, _, stage), acc);
    commitAndWait(acc);
  }

  float* last = kReverse ? p.dh0 : p.ht;
  if (last) storeStateBlock<Mma>(acc, cS, last + stateOffset, DV);
}

/// One state pass's tensor maps: x and y of [sequences, tokens, H, width], a packed batch one
/// sequence of all its tokens.
template <class T, int DK, int BV>
typename StateScanTiles<T, DK, BV>::Maps stateScanMaps(const BackwardParams& p, const void* x, const void* y) {
  typename StateScanTiles<T, DK, BV>::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  const bool ok = encodeTokenMap<T, DK>(&maps.x, x, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, BV>(&maps.y, y, p.value_dim, p.heads, layout, kChunk);
  LINAC_REQUIRE(ok, "hopper state pass: no tensor map for its operands (a driver without "
                    "cuTensorMapEncodeTiled, a tensor not 16-byte aligned, or more than 2^31 rows)");
  return maps;
}

template <class T, int DK, int BV, class Decay, bool kReverse>
__global__ void __launch_bounds__(kWarpgroupThreads)
    stateScanKernel(const BackwardParams p, const __grid_constant__ typename StateScanTiles<T, DK, BV>::Maps maps) {
  stateScanPass<T, DK, BV, Decay, kReverse>(p, maps, int(blockIdx.z));
}

/// Both directions in one launch: z < N the forward pass of sequence z, else the reverse pass of
/// sequence z - N.
template <class T, int DK, int BV, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads)
    stateScanJointKernel(const BackwardParams p, const __grid_constant__ typename StateScanTiles<T, DK, BV>::Maps forward,
                         const __grid_constant__ typename StateScanTiles<T, DK, BV>::Maps reverse) {
  const int z = int(blockIdx.z);
  if (z < p.num_seqs) stateScanPass<T, DK, BV, Decay, false>(p, forward, z);
  else stateScanPass<T, DK, BV, Decay, true>(p, reverse, z - p.num_seqs);
}

}  // namespace linac::kernels::cuda::hopper
