// Hopper forward, preparation stage of the delta rule (fla's WY / UT form): chunk-parallel, one CTA
// (one warpgroup) per (chunk slot, head); nothing here depends on the state.
//
// Per chunk of C = 64 tokens (b = cumulative log-decay from the chunk start, chunk_decay.cuh):
//   A[t][s] = beta_t (k_t . k_s) exp(b_t - b_s) for s < t, else 0          (K K^T on wgmma)
//   P[t][s] = scale (q_t . k_s) exp(b_t - b_s) for s <= t, else 0           (Q K^T, same batch)
//   X = (I + A)^-1   unit lower triangular, fp32: by two 32-row halves on every warp
//                    (p.block_inverse, the default), or column j by forward substitution (one
//                    thread per column: x_i = delta_ij - sum_{s < i} A[i][s] x_s;
//                    unit_lower_inverse.cuh)
//   T = X diag(beta),  W = T diag(exp(b)) K,  U = T V                       (wgmma)
// so that the state stage's X = U - W S is the chunk's d_t (state_output.cuh). W [B, T, H, dk] and
// U [B, T, H, dv] are written in the input dtype, as fla's recompute_w_u does; so is P
// [slots, H, C, C], which the state stage loads instead of computing Q K^T once per value block on
// its sequential path.
//
// Shared memory, by phase: q is read by the first batch only, so A (fp32) takes its place; T and
// T diag(exp(b)) take A's once every thread holds its share of X in registers. At dk <= 128 that
// is ~51 KB, four CTAs a SM where three fitted before (each CTA's work is one dependent sequence,
// so more CTAs keep more loads in flight: 260 -> 243 us at B8 T4096 H8 D128 on an H100). V lands
// in its own copy group, waited for only before the products that read it. q, k and v arrive by
// tensor-map copies (tma.cuh) issued by thread 0, g by cp.async, each group on its mbarrier; a
// packed sequence's partial chunk has its rows past the end zeroed after the copy.
#pragma once

#include "../chunk_slots.cuh"
#include "chunk_decay.cuh"
#include "forward_params.h"
#include "tiles.cuh"
#include "tma.cuh"
#include "unit_lower_inverse.cuh"

namespace linac::kernels::cuda::hopper {

template <class T, int DK, int DV>
struct DeltaPrepareTiles {
  static constexpr int C = kChunk;
  static constexpr int kValueBlock = 64;
  static constexpr int kValueBlocks = DV / kValueBlock;
  using K = RowTile<T, C, DK>;                   // [t, d]
  using Kt = Transposed<K, C, DK>;               // (d, t)
  using V = ColTile<T, kValueBlock, C, kValueBlocks>;  // (v, t, value block)
  using Tm = RowTile<T, C, C>;                   // T and T diag(exp(b)): [t, s]
  using Q = K;                                   // [t, d]

  using MmaKK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;
  using MmaW = WarpgroupMma<T, C, DK, C, GMMA::Major::K, GMMA::Major::MN>;
  using MmaU = WarpgroupMma<T, C, kValueBlock, C, GMMA::Major::K, GMMA::Major::MN>;

  // Tensor maps (tma.cuh): q, k as (64, 1, C, 1) boxes of [sequences, tokens, H, dk], v as
  // (kValueBlock, 1, C, 1) boxes of [sequences, tokens, H, dv].
  struct Maps {
    CUtensorMap q, k, v;
  };

  static constexpr int kLdA = C + 4;  // rows of A in 16-byte vectors
  struct Weights {  // T and T diag(exp(b)), written from X held in registers
    alignas(1024) T tm[cosize_v<Tm>];
    alignas(1024) T tw[cosize_v<Tm>];
  };
  struct Smem {
    alignas(1024) T k[cosize_v<K>];
    alignas(1024) T v[cosize_v<V>];
    union {
      alignas(1024) T q[cosize_v<Q>];  // the first batch (K K^T, Q K^T)
      alignas(1024) float a[C * kLdA];  // A, then X = (I + A)^-1 in place
      Weights weights;
    };
    float g[C];
    float b[C];
    float beta[C];
    uint64_t keysLoaded;    // q, k, g have landed
    uint64_t valuesLoaded;  // v has landed
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
  // CTAs a SM: four where the shared memory allows and W's accumulator (DK / 2 registers a
  // thread) leaves the kernel within 128 registers, i.e. at dk <= 128
  static constexpr int kSmemFit = kSharedBytesPerSm / int(kSmemBytes + kSharedBytesReservedPerCta);
  static constexpr int kMinBlocks = DK > 128 ? 1 : (kSmemFit < 4 ? kSmemFit : 4);
};

template <class T, int DK, int DV, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads, DeltaPrepareTiles<T, DK, DV>::kMinBlocks)
    deltaPrepareKernel(const ForwardParams p, const PrepareOutputs out,
                       const __grid_constant__ typename DeltaPrepareTiles<T, DK, DV>::Maps maps) {
  using Tiles = DeltaPrepareTiles<T, DK, DV>;
  constexpr int C = Tiles::C, VB = Tiles::kValueBlock;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk;
  const int64_t slot = blockIdx.x;
  if (!slotToChunk<C>(p, slot, n, bos, len, chunk)) return;
  const int tid = threadIdx.x, h = blockIdx.y, H = p.heads;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowK = int64_t(H) * DK, rowV = int64_t(H) * DV;  // W's and U's rows

  const auto tK = smemTile(sm.k, typename Tiles::K{});      // (C, DK)
  const auto tKt = smemTile(sm.k, typename Tiles::Kt{});    // (DK, C)
  const auto tV = smemTile(sm.v, typename Tiles::V{});      // (VB, C, value block)
  const auto tQ = smemTile(sm.q, typename Tiles::Q{});      // (C, DK)
  const auto tTm = smemTile(sm.weights.tm, typename Tiles::Tm{});  // (C, C)
  const auto tTw = smemTile(sm.weights.tw, typename Tiles::Tm{});  // (C, C)
  float* a = sm.a;

  // the maps' (token, sequence) of the chunk (a packed batch is one sequence of all its tokens)
  const auto origin = tokenMapOrigin<C>(p, n, bos);
  const int mapToken = origin.chunk(chunk), mapSeq = origin.seq;  // this chunk in the maps
  const bool partial = p.cu_seqlens != nullptr && rows < C;  // boxes past the end read the next sequence
  if (tid == 0) {
    barrierInit(&sm.keysLoaded, kWarpgroupThreads);
    barrierInit(&sm.valuesLoaded, kWarpgroupThreads);
  }
  __syncthreads();  // the mbarriers exist before any thread arrives
  if (tid == 0) {
    barrierExpectBytes(&sm.keysLoaded, 2 * C * DK * sizeof(T));
    bulkLoadTile4d<false, C, DK>(tQ, 0, &maps.q, 0, h, mapToken, mapSeq, &sm.keysLoaded);
    bulkLoadTile4d<false, C, DK>(tK, 0, &maps.k, 0, h, mapToken, mapSeq, &sm.keysLoaded);
  }
  stageLogDecay<Decay>(sm.g, p.g, tok0, rows, h, H);
  copyArrive(&sm.keysLoaded);
  if (tid == 0) {  // v, read by the last products only
    barrierExpectBytes(&sm.valuesLoaded, C * DV * sizeof(T));
    CUTE_UNROLL
    for (int j = 0; j < Tiles::kValueBlocks; ++j)
      bulkLoadTile4d<true, C, VB>(tV, j, &maps.v, j * VB, h, mapToken, mapSeq, &sm.valuesLoaded);
  }
  copyArrive(&sm.valuesLoaded);
  if (tid < C) sm.beta[tid] = tid < rows ? p.beta[(tok0 + tid) * H + h] : 0.f;
  barrierWait(&sm.keysLoaded, 0);
  if (partial) {
    zeroRows<false, C, DK, kWarpgroupThreads>(tQ, 0, rows);
    zeroRows<false, C, DK, kWarpgroupThreads>(tK, 0, rows);
  }
  fenceToAsyncProxy();
  __syncthreads();

  if constexpr (Decay::kActive) {
    if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g, p.g, rows, h);
  }
  typename Tiles::MmaKK mmaKK;
  auto thrKK = mmaKK.get_thread_slice(tid);
  Tensor accA = partition_fragment_C(mmaKK, Shape<Int<C>, Int<C>>{});
  Tensor accP = partition_fragment_C(mmaKK, Shape<Int<C>, Int<C>>{});
  const auto fK = thrKK.partition_fragment_B(tK.tensor()(_, _, 0));
  issue(accA, accP);
  gemm<true>(mmaKK, thrKK.partition_fragment_A(tK.tensor()(_, _, 0)), fK, accA);
  gemm<true>(mmaKK, thrKK.partition_fragment_A(tQ.tensor()(_, _, 0)), fK, accP);
  commitAndWait(accA, accP);
  __syncthreads();  // sm.b, sm.beta; every read of q done (A, T, T diag(exp(b)) take its place)

  auto decayAt = [&](int t) { return Decay::kActive ? sm.b[t] : 0.f; };
  using MmaKK = typename Tiles::MmaKK;
  const auto cA = accCoords<C, C>(mmaKK);
  T* pChunk = static_cast<T*>(out.p) + (slot * H + h) * int64_t(C) * C;  // [C, C]
  forEachPair<MmaKK>(cA, [&](int i, int t, int s) {
    const float2 ps = maskedScores<Decay>(accP(i), accP(i + 1), t, s, sm.b, p.scale);
    *reinterpret_cast<uint32_t*>(pChunk + t * C + s) = pack2<T>(ps.x, ps.y);
  });
  forEachPair<MmaKK>(cA, [&](int i, int t, int s) {
    const float bt = sm.beta[t];
    float f0 = bt, f1 = bt;
    if constexpr (Decay::kActive) {
      f0 *= __expf(fminf(decayAt(t) - decayAt(s), 0.f));  // s >= t is masked below
      f1 *= __expf(fminf(decayAt(t) - decayAt(s + 1), 0.f));
    }
    *reinterpret_cast<float2*>(&a[t * Tiles::kLdA + s]) =
        make_float2(s < t ? accA(i) * f0 : 0.f, s + 1 < t ? accA(i + 1) * f1 : 0.f);
  });
  __syncthreads();

  // T = X diag(beta) and T diag(exp(b)) go over X: each thread first reads its share of X into
  // registers, and writes once every thread has read.
  if (p.block_inverse) {
    unitLowerInverse<C, kWarpgroupThreads>(a, Tiles::kLdA);
    // column pairs (j, j + 1) of one row per 4-byte store
    constexpr int kPairs = C * C / 2 / kWarpgroupThreads;
    float2 x[kPairs];
    CUTE_UNROLL
    for (int r = 0; r < kPairs; ++r) {
      const int e = tid + r * kWarpgroupThreads, i = e / (C / 2), j = (e % (C / 2)) * 2;
      x[r] = make_float2(xAt(a, Tiles::kLdA, i, j) * sm.beta[j], xAt(a, Tiles::kLdA, i, j + 1) * sm.beta[j + 1]);
    }
    __syncthreads();
    CUTE_UNROLL
    for (int r = 0; r < kPairs; ++r) {
      const int e = tid + r * kWarpgroupThreads, i = e / (C / 2), j = (e % (C / 2)) * 2;
      sts32(tTm.at(i, j), pack2<T>(x[r].x, x[r].y));
      if constexpr (Decay::kActive)
        sts32(tTw.at(i, j), pack2<T>(x[r].x * __expf(decayAt(j)), x[r].y * __expf(decayAt(j + 1))));
      else
        sts32(tTw.at(i, j), pack2<T>(x[r].x, x[r].y));
    }
  } else {  // column j = tid of X = (I + A)^-1; every thread reads the same row of A
    const int j = tid;
    float x[C];
    if (j < C) unitLowerColumn<C>(a, Tiles::kLdA, j, x);
    __syncthreads();
    if (j < C) {
      const float bj = sm.beta[j], fj = Decay::kActive ? __expf(decayAt(j)) : 1.f;
      CUTE_UNROLL
      for (int i = 0; i < C; ++i) {
        sts16(tTm.at(i, j), pack1<T>(x[i] * bj));
        sts16(tTw.at(i, j), pack1<T>(x[i] * bj * fj));
      }
    }
  }
  barrierWait(&sm.valuesLoaded, 0);
  if (partial) {
    CUTE_UNROLL
    for (int j = 0; j < Tiles::kValueBlocks; ++j) zeroRows<true, C, VB, kWarpgroupThreads>(tV, j, rows);
  }
  fenceToAsyncProxy();
  __syncthreads();

  T* w = static_cast<T*>(out.w);
  T* u = static_cast<T*>(out.u);
  typename Tiles::MmaW mmaW;
  auto thrW = mmaW.get_thread_slice(tid);
  Tensor accW = partition_fragment_C(mmaW, Shape<Int<C>, Int<DK>>{});
  issue(accW);
  gemm<true>(mmaW, thrW.partition_fragment_A(tTw.tensor()(_, _, 0)),
             thrW.partition_fragment_B(tKt.tensor()(_, _, 0)), accW);
  commitAndWait(accW);
  T* wChunk = w + tok0 * rowK + int64_t(h) * DK;
  forEachPair<typename Tiles::MmaW>(accCoords<C, DK>(mmaW), [&](int i, int t, int d) {
    if (t < rows) *reinterpret_cast<uint32_t*>(wChunk + t * rowK + d) = pack2<T>(accW(i), accW(i + 1));
  });

  typename Tiles::MmaU mmaU;
  auto thrU = mmaU.get_thread_slice(tid);
  Tensor fTm = thrU.partition_fragment_A(tTm.tensor()(_, _, 0));
  Tensor fV = thrU.partition_fragment_B(tV.tensor());  // (MMA, N, K, value block)
  Tensor accU = partition_fragment_C(mmaU, Shape<Int<C>, Int<VB>>{});
  const auto cU = accCoords<C, VB>(mmaU);
  T* uChunk = u + tok0 * rowV + int64_t(h) * DV;
  CUTE_UNROLL
  for (int j = 0; j < Tiles::kValueBlocks; ++j) {
    issue(accU);
    gemm<true>(mmaU, fTm, fV(_, _, _, j), accU);
    commitAndWait(accU);
    forEachPair<typename Tiles::MmaU>(cU, [&](int i, int t, int c) {
      if (t < rows)
        *reinterpret_cast<uint32_t*>(uChunk + t * rowV + j * VB + c) = pack2<T>(accU(i), accU(i + 1));
    });
  }
}

}  // namespace linac::kernels::cuda::hopper
