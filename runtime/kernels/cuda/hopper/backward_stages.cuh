// Launches of the Hopper backward stages for one (element type, dk, dv, decay class); the
// backward_<dtype>.cu files instantiate them.
//   state passes: stateScanKernel forward (S_c) and reverse (dS_{c+1}, d_h0) into a workspace of
//                 two [slots, H, dk, dv] arrays in the input dtype (workspace.h)
//   gradients:    chunkGradKernel, one CTA of three warpgroups per (chunk slot, head) (dk, dv <=
//                 128); at dk 256 (runWideBackwardStages) chunkGradKeysKernel per (chunk slot,
//                 head, key block of 128), then chunkGradValuesKernel per (chunk slot, head, value
//                 block of 64)
#pragma once

#include "../cuda_check.h"
#include "../workspace.h"
#include "chunk_grad.cuh"
#include "chunk_grad_values.cuh"
#include "state_scan.cuh"

namespace linac::kernels::cuda::hopper {

template <class Kernel>
void setBackwardSmem(Kernel kernel, size_t bytes) {
  LINAC_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

/// The gradient stage's tensor maps (chunk_grad.cuh), once p's state workspaces are set.
template <class T, int DK, int DV>
typename ChunkGradTiles<T, DK, DV>::Maps chunkGradMaps(const BackwardParams& p, int64_t slots) {
  typename ChunkGradTiles<T, DK, DV>::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  const int64_t stateRows[2] = {DV, slots * p.heads * DK}, stateStride[1] = {DV};
  const bool ok = encodeTokenMap<T, DK>(&maps.q, p.q, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, DK>(&maps.k, p.k, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, DV>(&maps.v, p.v, DV, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, DV>(&maps.d_o, p.d_o, DV, p.heads, layout, kChunk) &&
                  encodeBoxMap<T, DV>(&maps.s, p.states, 2, stateRows, stateStride, 1, DK) &&
                  encodeBoxMap<T, DV>(&maps.ds, p.dstates, 2, stateRows, stateStride, 1, DK);
  LINAC_REQUIRE(ok, "hopper backward: no tensor map for the gradient stage's operands");
  return maps;
}

/// Both state passes into p.states / p.dstates (and d_h0), value blocks of kScanValueBlock columns:
/// one launch per direction, or one for both with p.joint_state_passes.
template <class T, int DK, class Decay>
void runStatePasses(const BackwardParams& p, cudaStream_t stream) {
  constexpr int BV = kScanValueBlock;
  constexpr size_t scanBytes = StateScanTiles<T, DK, BV>::kSmemBytes;
  if (p.joint_state_passes) {
    auto joint = stateScanJointKernel<T, DK, BV, Decay>;
    setBackwardSmem(joint, scanBytes);
    joint<<<dim3(p.value_dim / BV, p.heads, 2 * p.num_seqs), kWarpgroupThreads, scanBytes, stream>>>(
        p, stateScanMaps<T, DK, BV>(p, p.k, p.v), stateScanMaps<T, DK, BV>(p, p.q, p.d_o));
    LINAC_CUDA_CHECK_LAUNCH("hopper::stateScanJointKernel");
    return;
  }
  const dim3 scanGrid(p.value_dim / BV, p.heads, p.num_seqs);
  auto forward = stateScanKernel<T, DK, BV, Decay, false>;
  auto reverse = stateScanKernel<T, DK, BV, Decay, true>;
  setBackwardSmem(forward, scanBytes);
  setBackwardSmem(reverse, scanBytes);
  forward<<<scanGrid, kWarpgroupThreads, scanBytes, stream>>>(p, stateScanMaps<T, DK, BV>(p, p.k, p.v));
  LINAC_CUDA_CHECK_LAUNCH("hopper::stateScanKernel (forward)");
  reverse<<<scanGrid, kWarpgroupThreads, scanBytes, stream>>>(p, stateScanMaps<T, DK, BV>(p, p.q, p.d_o));
  LINAC_CUDA_CHECK_LAUNCH("hopper::stateScanKernel (reverse)");
}

template <class T, int DK, int DV, class Decay>
void runBackwardStages(BackwardParams p, int64_t slots, cudaStream_t stream) {
  const size_t stateBytes = size_t(slots) * p.heads * DK * DV * sizeof(T);
  const Workspace workspace(2 * stateBytes, stream);
  uint8_t* ws = workspace.data();
  p.states = ws;
  p.dstates = ws + stateBytes;
  runStatePasses<T, DK, Decay>(p, stream);

  auto grad = chunkGradKernel<T, DK, DV, Decay>;
  constexpr size_t gradBytes = ChunkGradTiles<T, DK, DV>::kSmemBytes;
  setBackwardSmem(grad, gradBytes);
  grad<<<dim3(unsigned(slots), p.heads), kGradThreads, gradBytes, stream>>>(p, chunkGradMaps<T, DK, DV>(p, slots));
  LINAC_CUDA_CHECK_LAUNCH("hopper::chunkGradKernel");
}

/// dk 256 (a multiple of kGradKeyBlock), dv a multiple of kGradValueBlock: the state passes, then
/// the key stage and the value stage (chunk_grad_keys.cuh), with one dg plane per key block.
template <class T, int DK, class Decay>
void runWideBackwardStages(BackwardParams p, int64_t slots, cudaStream_t stream) {
  static_assert(DK % kGradKeyBlock == 0, "whole key blocks");
  LINAC_REQUIRE(p.key_dim == DK && p.value_dim % kGradValueBlock == 0,
                "hopper backward: dk 256 takes dv in whole blocks of 64");
  constexpr int keyBlocks = DK / kGradKeyBlock;
  const int64_t DV = p.value_dim;
  const size_t stateBytes = size_t(slots) * p.heads * DK * DV * sizeof(T);
  const bool wantDg = Decay::kClass == DecayClass::Scalar && p.dg != nullptr;
  p.dg_plane = (p.cu_seqlens ? p.seq_len : int64_t(p.num_seqs) * p.seq_len) * p.heads;
  const size_t dgBytes = wantDg && keyBlocks > 1 ? size_t(keyBlocks) * p.dg_plane * sizeof(float) : 0;
  const Workspace workspace(2 * stateBytes + dgBytes, stream);
  uint8_t* ws = workspace.data();
  p.states = ws;
  p.dstates = ws + stateBytes;
  p.dg_part = dgBytes ? reinterpret_cast<float*>(ws + 2 * stateBytes) : nullptr;
  runStatePasses<T, DK, Decay>(p, stream);

  const TokenExtent layout = tokenExtent(p);
  const int64_t stateDims[2] = {DV, slots * p.heads * DK}, stateStride[1] = {DV};
  {
    using Tiles = ChunkGradKeyTiles<T>;
    typename Tiles::Maps maps{};
    const bool ok = encodeTokenMap<T, Tiles::KB>(&maps.q, p.q, DK, p.heads, layout, kChunk) &&
                    encodeTokenMap<T, Tiles::KB>(&maps.k, p.k, DK, p.heads, layout, kChunk) &&
                    encodeTokenMap<T, Tiles::VB>(&maps.v, p.v, DV, p.heads, layout, kChunk) &&
                    encodeTokenMap<T, Tiles::VB>(&maps.d_o, p.d_o, DV, p.heads, layout, kChunk) &&
                    encodeBoxMap<T, Tiles::VB>(&maps.s, p.states, 2, stateDims, stateStride, 1, Tiles::KB) &&
                    encodeBoxMap<T, Tiles::VB>(&maps.ds, p.dstates, 2, stateDims, stateStride, 1, Tiles::KB);
    LINAC_REQUIRE(ok, "hopper backward: no tensor map for the key stage's operands");
    auto kernel = chunkGradKeysKernel<T, Decay>;
    setBackwardSmem(kernel, Tiles::kSmemBytes);
    kernel<<<dim3(unsigned(slots), p.heads, keyBlocks), kGradThreads, Tiles::kSmemBytes, stream>>>(p, maps);
    LINAC_CUDA_CHECK_LAUNCH("hopper::chunkGradKeysKernel");
  }
  {
    using Tiles = ChunkGradValueTiles<T, DK>;
    typename Tiles::Maps maps{};
    const bool ok = encodeTokenMap<T, DK>(&maps.q, p.q, DK, p.heads, layout, kChunk) &&
                    encodeTokenMap<T, DK>(&maps.k, p.k, DK, p.heads, layout, kChunk) &&
                    encodeTokenMap<T, Tiles::VB>(&maps.d_o, p.d_o, DV, p.heads, layout, kChunk) &&
                    encodeBoxMap<T, Tiles::VB>(&maps.ds, p.dstates, 2, stateDims, stateStride, 1, DK);
    LINAC_REQUIRE(ok, "hopper backward: no tensor map for the value stage's operands");
    auto kernel = chunkGradValuesKernel<T, DK, Decay>;
    setBackwardSmem(kernel, Tiles::kSmemBytes);
    kernel<<<dim3(unsigned(slots), p.heads, unsigned(DV / Tiles::VB)), kWarpgroupThreads, Tiles::kSmemBytes, stream>>>(
        p, maps);
    LINAC_CUDA_CHECK_LAUNCH("hopper::chunkGradValuesKernel");
  }
}

}  // namespace linac::kernels::cuda::hopper

// Used inside namespace linac::kernels::cuda::hopper.
#define LINAC_HOPPER_BACKWARD_INSTANTIATE(T, DK, DV)                                   \
  template void runBackwardStages<T, DK, DV, NoDecay>(BackwardParams, int64_t,         \
                                                      cudaStream_t);                   \
  template void runBackwardStages<T, DK, DV, FixedDecay>(BackwardParams, int64_t,      \
                                                         cudaStream_t);                \
  template void runBackwardStages<T, DK, DV, ScalarDecay>(BackwardParams, int64_t,     \
                                                          cudaStream_t);

#define LINAC_HOPPER_WIDE_BACKWARD_INSTANTIATE(T, DK)                                          \
  template void runWideBackwardStages<T, DK, NoDecay>(BackwardParams, int64_t, cudaStream_t);    \
  template void runWideBackwardStages<T, DK, FixedDecay>(BackwardParams, int64_t, cudaStream_t); \
  template void runWideBackwardStages<T, DK, ScalarDecay>(BackwardParams, int64_t, cudaStream_t);
