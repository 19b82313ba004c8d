// Hopper forward, preparation stage of the delta rule (fla's WY / UT form): chunk-parallel, one CTA
// (one warpgroup) per (chunk slot, head); nothing here depends on the state.
//
// Per chunk of C = 64 tokens (b = cumulative log-decay from the chunk start, chunk_decay.cuh):
//   A[t][s] = beta_t (k_t . k_s) exp(b_t - b_s) for s < t, else 0          (K K^T on wgmma)
//   X = (I + A)^-1   unit lower triangular, fp32: column j by forward substitution (one thread
//                    per column: x_i = delta_ij - sum_{s < i} A[i][s] x_s), or with
//                    p.block_inverse by 16 x 16 blocks on every thread (unit_lower_inverse.cuh)
//   T = X diag(beta),  W = T diag(exp(b)) K,  U = T V                       (wgmma)
// so that the state stage's X = U - W S is the chunk's d_t (state_output.cuh). W [B, T, H, dk] and
// U [B, T, H, dv] are written in the input dtype, as fla's recompute_w_u does.
#pragma once

#include "../chunk_slots.cuh"
#include "chunk_decay.cuh"
#include "forward_params.h"
#include "tiles.cuh"
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

  using MmaKK = WarpgroupMma<T, C, C, DK, GMMA::Major::K, GMMA::Major::K>;
  using MmaW = WarpgroupMma<T, C, DK, C, GMMA::Major::K, GMMA::Major::MN>;
  using MmaU = WarpgroupMma<T, C, kValueBlock, C, GMMA::Major::K, GMMA::Major::MN>;

  static constexpr int kLdA = C + 4;  // rows of A in 16-byte vectors
  struct Smem {
    alignas(1024) T k[cosize_v<K>];
    alignas(1024) T v[cosize_v<V>];
    alignas(1024) T tm[cosize_v<Tm>];
    alignas(1024) T tw[cosize_v<Tm>];
    alignas(16) float a[C * kLdA];
    float g[C];
    float b[C];
    float beta[C];
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DK, int DV, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads)
    deltaPrepareKernel(const ForwardParams p, const PrepareOutputs out) {
  using Tiles = DeltaPrepareTiles<T, DK, DV>;
  constexpr int C = Tiles::C, VB = Tiles::kValueBlock;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  const uint32_t pad = (1024u - (static_cast<uint32_t>(__cvta_generic_to_shared(smemRaw)) & 1023u)) & 1023u;
  auto& sm = *reinterpret_cast<typename Tiles::Smem*>(smemRaw + pad);

  int n;
  int64_t bos, len, chunk;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk)) return;
  const int tid = threadIdx.x, h = blockIdx.y, H = p.heads;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowK = int64_t(H) * DK, rowV = int64_t(H) * DV;

  const auto tK = smemTile(sm.k, typename Tiles::K{});      // (C, DK)
  const auto tKt = smemTile(sm.k, typename Tiles::Kt{});    // (DK, C)
  const auto tV = smemTile(sm.v, typename Tiles::V{});      // (VB, C, value block)
  const auto tTm = smemTile(sm.tm, typename Tiles::Tm{});   // (C, C)
  const auto tTw = smemTile(sm.tw, typename Tiles::Tm{});   // (C, C)

  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  loadTile<false, C, DK, kWarpgroupThreads>(tK, 0, k + tok0 * rowK + int64_t(h) * DK, rowK, rows);
  CUTE_UNROLL
  for (int j = 0; j < Tiles::kValueBlocks; ++j)
    loadTile<true, C, VB, kWarpgroupThreads>(tV, j, v + tok0 * rowV + int64_t(h) * DV + j * VB,
                                             rowV, rows);
  stageLogDecay<Decay>(sm.g, p.g, tok0, rows, h, H);
  copyCommit();
  if (tid < C) sm.beta[tid] = tid < rows ? p.beta[(tok0 + tid) * H + h] : 0.f;
  copyWait<0>();
  fenceToAsyncProxy();
  __syncthreads();

  if constexpr (Decay::kActive) {
    if (tid < 32) chunkLogDecay<Decay>(sm.b, sm.g, p.g, rows, h);
  }
  typename Tiles::MmaKK mmaKK;
  auto thrKK = mmaKK.get_thread_slice(tid);
  Tensor accA = partition_fragment_C(mmaKK, Shape<Int<C>, Int<C>>{});
  issue(accA);
  gemm<true>(mmaKK, thrKK.partition_fragment_A(tK.tensor()(_, _, 0)),
             thrKK.partition_fragment_B(tK.tensor()(_, _, 0)), accA);
  commitAndWait(accA);
  __syncthreads();  // sm.b, sm.beta

  auto decayAt = [&](int t) { return Decay::kActive ? sm.b[t] : 0.f; };
  using MmaKK = typename Tiles::MmaKK;
  forEachPair<MmaKK>(accCoords<C, C>(mmaKK), [&](int i, int t, int s) {
    const float bt = sm.beta[t];
    float f0 = bt, f1 = bt;
    if constexpr (Decay::kActive) {
      f0 *= __expf(fminf(decayAt(t) - decayAt(s), 0.f));  // s >= t is masked below
      f1 *= __expf(fminf(decayAt(t) - decayAt(s + 1), 0.f));
    }
    *reinterpret_cast<float2*>(&sm.a[t * Tiles::kLdA + s]) =
        make_float2(s < t ? accA(i) * f0 : 0.f, s + 1 < t ? accA(i + 1) * f1 : 0.f);
  });
  __syncthreads();

  if (p.block_inverse) {
    unitLowerInverse<C, kWarpgroupThreads>(sm.a, Tiles::kLdA);
    // T = X diag(beta) and T diag(exp(b)), column pairs (j, j + 1) of one row per 4-byte store.
    for (int e = tid; e < C * C / 2; e += kWarpgroupThreads) {
      const int i = e / (C / 2), j = (e % (C / 2)) * 2;
      const float x0 = xAt(sm.a, Tiles::kLdA, i, j) * sm.beta[j];
      const float x1 = xAt(sm.a, Tiles::kLdA, i, j + 1) * sm.beta[j + 1];
      sts32(tTm.at(i, j), pack2<T>(x0, x1));
      if constexpr (Decay::kActive)
        sts32(tTw.at(i, j), pack2<T>(x0 * __expf(decayAt(j)), x1 * __expf(decayAt(j + 1))));
      else
        sts32(tTw.at(i, j), pack2<T>(x0, x1));
    }
  } else if (tid < C) {  // column j = tid of X = (I + A)^-1; every thread reads the same row of A
    const int j = tid;
    float x[C];
    unitLowerColumn<C>(sm.a, Tiles::kLdA, j, x);
    const float bj = sm.beta[j], fj = Decay::kActive ? __expf(decayAt(j)) : 1.f;
    CUTE_UNROLL
    for (int i = 0; i < C; ++i) {
      sts16(tTm.at(i, j), pack1<T>(x[i] * bj));
      sts16(tTw.at(i, j), pack1<T>(x[i] * bj * fj));
    }
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
