// Hopper forward, preparation stage of the delta rule (fla's WY / UT form): chunk-parallel, one CTA
// (one warpgroup) per (chunk slot, head); nothing here depends on the state.
//
// Per chunk of C = 64 tokens (b = cumulative log-decay from the chunk start, chunk_decay.cuh):
//   A[t][s] = beta_t (k_t . k_s) exp(b_t - b_s) for s < t, else 0          (K K^T on wgmma)
//   X = (I + A)^-1   unit lower triangular; column j by forward substitution in fp32 (one thread
//                    per column: x_i = delta_ij - sum_{s < i} A[i][s] x_s)
//   T = X diag(beta),  W = T diag(exp(b)) K,  U = T V                       (wgmma)
// so that the state stage's X = U - W S is the chunk's d_t (state_output.cuh). W [B, T, H, dk] and
// U [B, T, H, dv] are written in the input dtype, as fla's recompute_w_u does.
#pragma once

#include "../chunk_slots.cuh"
#include "chunk_decay.cuh"
#include "forward_params.h"
#include "tiles.cuh"

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

  static constexpr int kLdA = C + 1;
  struct Smem {
    alignas(1024) T k[cosize_v<K>];
    alignas(1024) T v[cosize_v<V>];
    alignas(1024) T tm[cosize_v<Tm>];
    alignas(1024) T tw[cosize_v<Tm>];
    float a[C * kLdA];
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
  extern __shared__ uint8_t smemRaw[];
  auto& sm = *reinterpret_cast<typename Tiles::Smem*>(
      (reinterpret_cast<uintptr_t>(smemRaw) + 1023) & ~uintptr_t(1023));

  int n;
  int64_t bos, len, chunk;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk)) return;
  const int tid = threadIdx.x, h = blockIdx.y, H = p.heads;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowK = int64_t(H) * DK, rowV = int64_t(H) * DV;

  Tensor sK = smemTensor(sm.k, typename Tiles::K{});
  Tensor sKt = smemTensor(sm.k, typename Tiles::Kt{});
  Tensor sV = smemTensor(sm.v, typename Tiles::V{});
  Tensor sTm = smemTensor(sm.tm, typename Tiles::Tm{});
  Tensor sTw = smemTensor(sm.tw, typename Tiles::Tm{});

  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  loadTile<false, C, DK, kWarpgroupThreads>(sK(_, _, 0), k + tok0 * rowK + int64_t(h) * DK, rowK,
                                            rows);
  CUTE_UNROLL
  for (int j = 0; j < Tiles::kValueBlocks; ++j)
    loadTile<true, C, VB, kWarpgroupThreads>(sV(_, _, j),
                                             v + tok0 * rowV + int64_t(h) * DV + j * VB, rowV, rows);
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
  gemm<true>(mmaKK, thrKK.partition_fragment_A(sK(_, _, 0)), thrKK.partition_fragment_B(sK(_, _, 0)),
             accA);
  commitAndWait(accA);
  __syncthreads();  // sm.b, sm.beta

  auto decayAt = [&](int t) { return Decay::kActive ? sm.b[t] : 0.f; };
  const auto cA = accCoords<C, C>(mmaKK);
  CUTE_UNROLL
  for (int i = 0; i < size(accA); ++i) {
    const int t = get<0>(cA(i)), s = get<1>(cA(i));
    const float f = Decay::kActive ? __expf(decayAt(t) - decayAt(s)) : 1.f;
    sm.a[t * Tiles::kLdA + s] = s < t ? sm.beta[t] * accA(i) * f : 0.f;
  }
  __syncthreads();

  if (tid < C) {  // column j = tid of X = (I + A)^-1
    const int j = tid;
    float x[C];
    CUTE_UNROLL
    for (int i = 0; i < C; ++i) {
      float s = 0.f;
      CUTE_UNROLL
      for (int e = 0; e < i; ++e) s += sm.a[i * Tiles::kLdA + e] * x[e];
      x[i] = (i == j ? 1.f : 0.f) - s;
    }
    const float bj = sm.beta[j], fj = Decay::kActive ? __expf(decayAt(j)) : 1.f;
    CUTE_UNROLL
    for (int i = 0; i < C; ++i) {
      sTm(i, j, 0) = T(x[i] * bj);
      sTw(i, j, 0) = T(x[i] * bj * fj);
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
  gemm<true>(mmaW, thrW.partition_fragment_A(sTw(_, _, 0)), thrW.partition_fragment_B(sKt(_, _, 0)),
             accW);
  commitAndWait(accW);
  const auto cW = accCoords<C, DK>(mmaW);
  CUTE_UNROLL
  for (int i = 0; i < size(accW); ++i) {
    const int t = get<0>(cW(i)), d = get<1>(cW(i));
    if (t < rows) w[(tok0 + t) * rowK + int64_t(h) * DK + d] = T(accW(i));
  }

  typename Tiles::MmaU mmaU;
  auto thrU = mmaU.get_thread_slice(tid);
  Tensor fTm = thrU.partition_fragment_A(sTm(_, _, 0));
  Tensor fV = thrU.partition_fragment_B(sV);  // (MMA, N, K, value block)
  Tensor accU = partition_fragment_C(mmaU, Shape<Int<C>, Int<VB>>{});
  const auto cU = accCoords<C, VB>(mmaU);
  CUTE_UNROLL
  for (int j = 0; j < Tiles::kValueBlocks; ++j) {
    issue(accU);
    gemm<true>(mmaU, fTm, fV(_, _, _, j), accU);
    commitAndWait(accU);
    CUTE_UNROLL
    for (int i = 0; i < size(accU); ++i) {
      const int t = get<0>(cU(i)), c = get<1>(cU(i));
      if (t < rows) u[(tok0 + t) * rowV + int64_t(h) * DV + j * VB + c] = T(accU(i));
    }
  }
}

}  // namespace linac::kernels::cuda::hopper
