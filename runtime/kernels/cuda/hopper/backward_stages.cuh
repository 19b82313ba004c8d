// Launches of the Hopper backward stages for one (element type, dk, dv, decay class); the
// backward_<dtype>.cu files instantiate them.
//   state passes: stateScanKernel forward (S_c) and reverse (dS_{c+1}, d_h0) into a workspace of
//                 two [slots, H, dk, dv] arrays in the input dtype (workspace.h)
//   gradients:    chunkGradKernel, one CTA of three warpgroups per (chunk slot, head)
#pragma once

#include "../cuda_check.h"
#include "../workspace.h"
#include "chunk_grad.cuh"
#include "state_scan.cuh"

namespace linac::kernels::cuda::hopper {

constexpr int kScanValueBlock = 32;  // value columns per CTA of the state passes

template <class Kernel>
void setBackwardSmem(Kernel kernel, size_t bytes) {
  LINAC_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

/// One state pass's tensor maps (state_scan.cuh): x and y of [sequences, tokens, H, width], a
/// packed batch one sequence of all its tokens.
template <class T, int DK, int BV>
typename StateScanTiles<T, DK, BV>::Maps stateScanMaps(const BackwardParams& p, const void* x, const void* y) {
  typename StateScanTiles<T, DK, BV>::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  const bool ok = encodeTokenMap<T, DK>(&maps.x, x, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, BV>(&maps.y, y, p.value_dim, p.heads, layout, kChunk);
  LINAC_REQUIRE(ok, "hopper backward: no tensor map for the state passes' operands (a driver "
                    "without cuTensorMapEncodeTiled, a tensor not 16-byte aligned, or more than "
                    "2^31 rows)");
  return maps;
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

template <class T, int DK, int DV, class Decay>
void runBackwardStages(BackwardParams p, int64_t slots, cudaStream_t stream) {
  const size_t stateBytes = size_t(slots) * p.heads * DK * DV * sizeof(T);
  const Workspace workspace(2 * stateBytes, stream);
  uint8_t* ws = workspace.data();
  p.states = ws;
  p.dstates = ws + stateBytes;

  constexpr int BV = kScanValueBlock;
  constexpr size_t scanBytes = StateScanTiles<T, DK, BV>::kSmemBytes;
  const dim3 scanGrid(DV / BV, p.heads, p.num_seqs);
  auto forward = stateScanKernel<T, DK, BV, Decay, false>;
  auto reverse = stateScanKernel<T, DK, BV, Decay, true>;
  setBackwardSmem(forward, scanBytes);
  setBackwardSmem(reverse, scanBytes);
  forward<<<scanGrid, kWarpgroupThreads, scanBytes, stream>>>(p, stateScanMaps<T, DK, BV>(p, p.k, p.v));
  LINAC_CUDA_CHECK_LAUNCH("hopper::stateScanKernel (forward)");
  reverse<<<scanGrid, kWarpgroupThreads, scanBytes, stream>>>(p, stateScanMaps<T, DK, BV>(p, p.q, p.d_o));
  LINAC_CUDA_CHECK_LAUNCH("hopper::stateScanKernel (reverse)");

  auto grad = chunkGradKernel<T, DK, DV, Decay>;
  constexpr size_t gradBytes = ChunkGradTiles<T, DK, DV>::kSmemBytes;
  setBackwardSmem(grad, gradBytes);
  grad<<<dim3(unsigned(slots), p.heads), kGradThreads, gradBytes, stream>>>(p, chunkGradMaps<T, DK, DV>(p, slots));
  LINAC_CUDA_CHECK_LAUNCH("hopper::chunkGradKernel");
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
