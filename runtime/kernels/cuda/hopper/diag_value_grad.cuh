// Hopper backward of the diagonal decay, by key block: the value stage, and the two stages'
// launch. diag_key_grad.cuh's key stage leaves, per chunk slot and head, each key block's share of
// A^T (fp32) and K e^{B - b} (input dtype); here one warpgroup per (chunk slot, head, value block)
// forms
//   dv = (K e^{B - b}) dS_{c+1} + A^T dO,   A^T = sum over the key blocks of their shares,
// two wgmma products of K = dk and K = C, with A^T rounded to the input dtype once, after the sum.
// Shared memory at dk = dv = 128: 72 KB, three CTAs a SM.
#pragma once

#include "diag_key_grad.cuh"

#include <algorithm>

namespace linac::kernels::cuda::hopper {

template <class T, int DK, int DV>
struct DiagValueGradTiles {
  static constexpr int C = kChunk;
  using G = ChunkGradTiles<T, DK, DV>;
  using MmaAtO = WarpgroupMma<T, C, DV, C, GMMA::Major::K, GMMA::Major::MN>;  // A^T dO
  struct Smem {
    alignas(1024) T x[cosize_v<typename G::Qk>];   // K e^{B - b} [s, c]
    alignas(1024) T ds[cosize_v<typename G::St>];  // dS_{c+1} [d, v], the value block's columns
    alignas(1024) T o[cosize_v<typename G::Vo>];   // dO [t, v]
    alignas(1024) T at[cosize_v<typename G::Sq>];  // A^T [s, t]
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DK, int DV>
__global__ void __launch_bounds__(kWarpgroupThreads) diagValueGradKernel(const DiagGradParams p, int keyBlocks) {
  using Tiles = DiagValueGradTiles<T, DK, DV>;
  using G = typename Tiles::G;
  constexpr int C = Tiles::C;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, h = blockIdx.y, H = p.heads;
  const int64_t tok0 = bos + chunk * C, slot = coff + chunk;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int dvAll = p.value_dim, v0 = int(blockIdx.z) * DV;
  const int64_t rowK = int64_t(H) * DK, rowV = int64_t(H) * dvAll;

  const auto tX = smemTile(sm.x, typename G::Qk{});
  const auto tDSt = smemTile(sm.ds, typename G::StT{});
  const auto tDS = smemTile(sm.ds, typename G::St{});
  const auto tO = smemTile(sm.o, typename G::Vo{});
  const auto tOt = smemTile(sm.o, typename G::VoT{});
  const auto tAt = smemTile(sm.at, typename G::Sq{});

  const int64_t st = (slot * H + h) * int64_t(DK) * dvAll + v0;  // [slots, H, dk, dv]
  loadTile<false, C, DK, kWarpgroupThreads>(tX, 0, static_cast<const T*>(p.kexp) + tok0 * rowK + int64_t(h) * DK,
                                            rowK, rows);
  loadTile<false, DK, DV, kWarpgroupThreads>(tDS, 0, static_cast<const T*>(p.dstates) + st, dvAll, DK);
  loadTile<false, C, DV, kWarpgroupThreads>(tO, 0, static_cast<const T*>(p.d_o) + tok0 * rowV + int64_t(h) * dvAll + v0,
                                            rowV, rows);
  copyCommit();
  {  // A^T: the key blocks' shares summed in fp32, then rounded; four elements a thread per step
    const float* at = p.at_part + (slot * H + h) * int64_t(C * C);
    for (int i = tid; i < C * C / 4; i += kWarpgroupThreads) {
      float4 sum = reinterpret_cast<const float4*>(at)[i];
      for (int kb = 1; kb < keyBlocks; ++kb) {
        const float4 x = reinterpret_cast<const float4*>(at + kb * p.at_plane)[i];
        sum = make_float4(sum.x + x.x, sum.y + x.y, sum.z + x.z, sum.w + x.w);
      }
      const int s = i / (C / 4), t = (i % (C / 4)) * 4;
      sts32(tAt.at(s, t), pack2<T>(sum.x, sum.y));
      sts32(tAt.at(s, t + 2), pack2<T>(sum.z, sum.w));
    }
  }
  copyWait<0>();
  fenceToAsyncProxy();
  __syncthreads();

  typename G::MmaKdS mmaKdS;
  typename Tiles::MmaAtO mmaAtO;
  auto thrV = mmaKdS.get_thread_slice(tid);
  auto thrA = mmaAtO.get_thread_slice(tid);
  Tensor accV = partition_fragment_C(mmaKdS, Shape<Int<C>, Int<DV>>{});  // dv
  issue(accV);
  gemm<true>(mmaKdS, thrV.partition_fragment_A(tX.tensor()(_, _, 0)), thrV.partition_fragment_B(tDSt.tensor()(_, _, 0)),
             accV);
  gemm<false>(mmaAtO, thrA.partition_fragment_A(tAt.tensor()(_, _, 0)), thrA.partition_fragment_B(tOt.tensor()(_, _, 0)),
              accV);
  commitAndWait(accV);
  T* dv = static_cast<T*>(p.dv) + tok0 * rowV + int64_t(h) * dvAll + v0;
  forEachPair<typename G::MmaKdS>(accCoords<C, DV>(mmaKdS), [&](int i, int s, int c) {
    if (s < rows) *reinterpret_cast<uint32_t*>(dv + s * rowV + c) = pack2<T>(accV(i), accV(i + 1));
  });
}

/// The gradient stage over every chunk slot and head (diag_grad_<dtype>.cu instantiate it): the key
/// stage (its CTAs walk the value tiles of DV columns), then the value stage, a CTA per value tile,
/// where dv is wanted (p.at_part and p.kexp set).
template <class T, int DK, int DV>
void runDiagGrad(const DiagGradParams& p, int64_t slots, cudaStream_t stream) {
  static_assert(DK % kDiagKeyBlock == 0, "whole key blocks");
  constexpr int keyBlocks = DK / kDiagKeyBlock;
  LINAC_REQUIRE(p.key_dim == DK, "hopper diagKeyGrad: key_dim and the instantiation disagree");
  LINAC_REQUIRE(p.value_dim == DV || (DV == 128 && p.value_dim % DV == 0), "hopper diagKeyGrad: whole value tiles of 128");
  auto kernel = p.low_halves ? diagKeyGradKernel<T, DV, true, false> : diagKeyGradKernel<T, DV, false, false>;
  if constexpr (DV == 128) {
    if (p.value_dim > DV)
      kernel = p.low_halves ? diagKeyGradKernel<T, DV, true, true> : diagKeyGradKernel<T, DV, false, true>;
  }
  constexpr size_t bytes = DiagKeyGradTiles<T, DV>::kSmemBytes;
  static_assert(2 * (bytes + kSharedBytesReservedPerCta) <= size_t(kSharedBytesPerSm), "two CTAs per SM");
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<dim3(unsigned(slots), p.heads, unsigned(keyBlocks)), kKeyGradThreads, bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("hopper::diagKeyGradKernel");
  if (!p.dv) return;
  LINAC_REQUIRE(p.at_part && p.kexp, "hopper diagValueGrad: the key stage's workspaces are missing");
  auto values = diagValueGradKernel<T, DK, DV>;
  constexpr size_t valueBytes = DiagValueGradTiles<T, DK, DV>::kSmemBytes;
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(values, cudaFuncAttributeMaxDynamicSharedMemorySize, int(valueBytes)));
  const unsigned valueTiles = unsigned(p.value_dim / DV);
  values<<<dim3(unsigned(slots), p.heads, valueTiles), kWarpgroupThreads, valueBytes, stream>>>(p, keyBlocks);
  LINAC_CUDA_CHECK_LAUNCH("hopper::diagValueGradKernel");
}

}  // namespace linac::kernels::cuda::hopper

// Used inside namespace linac::kernels::cuda::hopper.
#define LINAC_HOPPER_DIAG_GRAD_INSTANTIATE(T)                                                  \
  template void runDiagGrad<T, 64, 64>(const DiagGradParams&, int64_t, cudaStream_t);  \
  template void runDiagGrad<T, 64, 128>(const DiagGradParams&, int64_t, cudaStream_t); \
  template void runDiagGrad<T, 128, 64>(const DiagGradParams&, int64_t, cudaStream_t); \
  template void runDiagGrad<T, 128, 128>(const DiagGradParams&, int64_t, cudaStream_t); \
  template void runDiagGrad<T, 256, 128>(const DiagGradParams&, int64_t, cudaStream_t);
