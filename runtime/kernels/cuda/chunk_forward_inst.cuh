// Instantiates and launches chunkForwardKernel for one element type (one .cu file per type so the
// instantiations compile in parallel).
#pragma once

#include "chunk_forward.cuh"
#include "cuda_check.h"

namespace linac::kernels::cuda {

template <typename T, int DK, bool DELTA, bool DIAG, class Roles = MaterializedRoles>
void launchChunkForwardT(const ChunkFwdParams<T>& p, int num_seqs, cudaStream_t stream) {
  using Cfg = ChunkConfig<DK, DELTA, DIAG>;
  constexpr int C = Cfg::C, BV = Cfg::BV;
  using L = ChunkSmem<DK, BV, C, DELTA, DIAG>;
  LINAC_REQUIRE(p.value_dim % BV == 0,
                "chunkForward: value_dim must be a multiple of " + std::to_string(BV));
  auto kernel = chunkForwardKernel<T, DK, BV, C, DELTA, DIAG, Roles>;
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(L::bytes)));
  const dim3 grid(p.value_dim / BV, p.heads, num_seqs);
  kernel<<<grid, kChunkThreads, L::bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("chunkForwardKernel");
}

template <typename T, int DK>
void launchChunkForwardDK(const ChunkFwdParams<T>& p, bool delta, bool diag, int num_seqs,
                          cudaStream_t stream) {
  if (delta) {
    if (diag) launchChunkForwardT<T, DK, true, true>(p, num_seqs, stream);
    else launchChunkForwardT<T, DK, true, false>(p, num_seqs, stream);
  } else {
    if (diag) launchChunkForwardT<T, DK, false, true>(p, num_seqs, stream);
    else launchChunkForwardT<T, DK, false, false>(p, num_seqs, stream);
  }
}

template <typename T>
void launchChunkForward(const ChunkFwdParams<T>& p, int key_dim, bool delta, bool diag,
                        int num_seqs, cudaStream_t stream) {
  switch (key_dim) {
    case 64: launchChunkForwardDK<T, 64>(p, delta, diag, num_seqs, stream); break;
    case 128: launchChunkForwardDK<T, 128>(p, delta, diag, num_seqs, stream); break;
    case 256: launchChunkForwardDK<T, 256>(p, delta, diag, num_seqs, stream); break;
    default: LINAC_REQUIRE(false, "chunkForward: key_dim must be 64, 128 or 256, got " +
                                      std::to_string(key_dim));
  }
}

}  // namespace linac::kernels::cuda

#define LINAC_INSTANTIATE_CHUNK_FORWARD(T)                                                   \
  template void linac::kernels::cuda::launchChunkForward<T>(                                 \
      const ChunkFwdParams<T>&, int, bool, bool, int, cudaStream_t);
