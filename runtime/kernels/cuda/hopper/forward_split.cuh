// The Hopper forward of the additive rule (decay none / fixed / scalar) in its split form, for
// one (element type, key dim, decay class); forward_split_<dtype>.cu instantiate it:
//   state pass:    stateScanKernel, forward direction (state_scan.cuh): S_c for every chunk slot
//                  into a [slots, H, dk, dv] workspace in the input dtype, and ht
//   output stage:  chunkOutputKernel (chunk_output.cuh), one CTA per (chunk slot, head, value
//                  block of 64)
// The fused state stage (state_output.cuh) forms each chunk's output on its serial chain of
// chunks; this form's chain carries K^T V alone. forward.cu says when it runs.
#pragma once

#include "../cuda_check.h"
#include "../device_info.h"
#include "../workspace.h"
#include "backward_params.h"
#include "chunk_output.cuh"
#include "forward_params.h"
#include "state_scan.cuh"

namespace linac::kernels::cuda::hopper {

/// The state pass's value block: 32 columns, or kThinValueBlock where blocks of 32 make fewer
/// CTAs than SMs (the chain of chunks is the pass's time there).
template <class T, int DK, int BV, class Decay>
void launchSplitStatePass(const BackwardParams& s, cudaStream_t stream) {
  using Tiles = StateScanTiles<T, DK, BV>;
  typename Tiles::Maps maps{};
  const TokenExtent layout = tokenExtent(s);
  const bool ok = encodeTokenMap<T, DK>(&maps.x, s.k, DK, s.heads, layout, kChunk) &&
                  encodeTokenMap<T, BV>(&maps.y, s.v, s.value_dim, s.heads, layout, kChunk);
  LINAC_REQUIRE(ok, "hopper forward: no tensor map for the state pass's operands (a driver without "
                    "cuTensorMapEncodeTiled, a tensor not 16-byte aligned, or more than 2^31 rows)");
  auto kernel = stateScanKernel<T, DK, BV, Decay, false>;
  LINAC_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tiles::kSmemBytes)));
  kernel<<<dim3(s.value_dim / BV, s.heads, s.num_seqs), kWarpgroupThreads, Tiles::kSmemBytes, stream>>>(s, maps);
  LINAC_CUDA_CHECK_LAUNCH("hopper::stateScanKernel (split forward)");
}

template <class T, int DK, class Decay>
void runSplitStages(ForwardParams p, cudaStream_t stream) {
  LINAC_REQUIRE(p.value_dim % kOutputValueBlock == 0, "hopper split forward: dv in whole blocks of 64");
  const size_t stateBytes = size_t(p.slots) * p.heads * DK * p.value_dim * sizeof(T);
  const Workspace workspace(stateBytes, stream);

  BackwardParams s{};
  s.q = p.q;
  s.k = p.k;
  s.v = p.v;
  s.g = p.g;
  s.h0 = p.h0;
  s.ht = p.ht;
  s.states = workspace.data();
  s.cu_seqlens = p.cu_seqlens;
  s.seq_len = p.seq_len;
  s.chunks_per_seq = p.chunks_per_seq;
  s.num_seqs = p.num_seqs;
  s.heads = p.heads;
  s.key_dim = DK;
  s.value_dim = p.value_dim;
  s.scale = p.scale;
  constexpr int kWide = 32;
  if (int64_t(p.value_dim / kWide) * p.heads * p.num_seqs < multiprocessorCount())
    launchSplitStatePass<T, DK, kThinValueBlock, Decay>(s, stream);
  else
    launchSplitStatePass<T, DK, kWide, Decay>(s, stream);

  using Tiles = ChunkOutputTiles<T, DK>;
  typename Tiles::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  const int64_t stateDims[2] = {p.value_dim, p.slots * p.heads * DK}, stateStride[1] = {p.value_dim};
  const bool ok = encodeTokenMap<T, DK>(&maps.q, p.q, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, DK>(&maps.k, p.k, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, Tiles::VB>(&maps.v, p.v, p.value_dim, p.heads, layout, kChunk) &&
                  encodeBoxMap<T, Tiles::VB>(&maps.s, s.states, 2, stateDims, stateStride, 1, DK);
  LINAC_REQUIRE(ok, "hopper forward: no tensor map for the output stage's operands");
  auto kernel = chunkOutputKernel<T, DK, Decay>;
  LINAC_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tiles::kSmemBytes)));
  const dim3 grid(unsigned(p.slots), p.heads, unsigned(p.value_dim / Tiles::VB));
  kernel<<<grid, kWarpgroupThreads, Tiles::kSmemBytes, stream>>>(p, maps);
  LINAC_CUDA_CHECK_LAUNCH("hopper::chunkOutputKernel");
}

}  // namespace linac::kernels::cuda::hopper

// Used inside namespace linac::kernels::cuda::hopper: the split form at every key dim and decay
// class for one element type.
#define LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE_DK(T, DK)                             \
  template void runSplitStages<T, DK, NoDecay>(ForwardParams, cudaStream_t);          \
  template void runSplitStages<T, DK, FixedDecay>(ForwardParams, cudaStream_t);       \
  template void runSplitStages<T, DK, ScalarDecay>(ForwardParams, cudaStream_t);
#define LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE(T)    \
  LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE_DK(T, 64)   \
  LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE_DK(T, 128)  \
  LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE_DK(T, 256)
