// Launches of the delta rule's Hopper backward for one (element type, dk, dv, decay class); the
// backward_delta_<dtype>.cu files instantiate them. Five stages, in stream order:
//   1 deltaBwdPrepareKernel       grid (slots, H), 1 warpgroup:  X, W, U, dD_local
//   2 deltaBwdForwardStateKernel  grid (dv / BV, H, N), 1 wg:    S_c, D (over U)
//   3 deltaBwdReverseStateKernel  grid (dv / BV, H, N), 1 wg:    dS_{c+1}, dD (over dD_local), d_h0
//   4 deltaBwdGradKernel          grid (slots, H, key blocks), 3 wg:  dq, dk part, dW, db part, Z
//   or, with p.fused_reverse at dk, dv <= 128, 3 and 4 in one pass that keeps dS on chip:
//   3+4 deltaBwdReverseGradKernel grid (H, N), dk / 64 wg:       dD, dq, dk part, dW, db part, Z, d_h0
//   5 deltaBwdWyKernel            grid (slots, H), 2 wg:         dv, dk, dbeta, dg
// The workspace (delta_bwd_params.h) is one block (workspace.h), released in stream order.
#pragma once

#include "../cuda_check.h"
#include "../workspace.h"
#include "delta_bwd_forward_state.cuh"
#include "delta_bwd_grad.cuh"
#include "delta_bwd_prepare.cuh"
#include "delta_bwd_reverse_grad.cuh"
#include "delta_bwd_reverse_state.cuh"
#include "delta_bwd_wy.cuh"

namespace linac::kernels::cuda::hopper {

constexpr size_t kWorkspaceAlign = 256;     // bytes; every workspace array starts aligned
constexpr size_t kMaxSmemPerBlock = 227 * 1024;  // sm_90's opt-in dynamic shared memory per block

template <class Kernel>
void setDeltaBwdSmem(Kernel kernel, size_t bytes) {
  LINAC_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

/// The state passes' tensor maps (delta_bwd_common.cuh), once p.w points at its workspace.
template <class T, int DK, int BV>
DeltaStateMaps deltaStateMaps(const DeltaBackwardParams& p) {
  DeltaStateMaps maps{};
  const TokenExtent layout = tokenExtent(p);
  const bool ok = encodeTokenMap<T, DK>(&maps.q, p.q, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, DK>(&maps.k, p.k, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, DK>(&maps.w, p.w, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, BV>(&maps.d_o, p.d_o, p.value_dim, p.heads, layout, kChunk);
  LINAC_REQUIRE(ok, "hopper delta backward: no tensor map for the state passes' operands (a driver "
                    "without cuTensorMapEncodeTiled, a tensor not 16-byte aligned, or more than "
                    "2^31 rows)");
  return maps;
}

/// The gradient stage's tensor maps (delta_bwd_grad.cuh), once p's workspaces are set.
template <class T, int DK>
typename DeltaBwdGradTiles<T, DK>::Maps deltaGradMaps(const DeltaBackwardParams& p, int64_t slots) {
  using Tiles = DeltaBwdGradTiles<T, DK>;
  constexpr int C = kChunk, VB = Tiles::VB, KB = Tiles::KB;
  typename Tiles::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  const int64_t DV = p.value_dim, stateRows[2] = {DV, slots * p.heads * DK}, stateStride[1] = {DV};
  const bool ok =
      encodeTokenMap<T, KB>(&maps.q, p.q, DK, p.heads, layout, C) &&
      encodeTokenMap<T, KB>(&maps.k, p.k, DK, p.heads, layout, C) &&
      encodeTokenMap<T, VB>(&maps.d_o, p.d_o, DV, p.heads, layout, C) &&
      encodeFloatTokenMap(&maps.ud, p.ud, DV, p.heads, layout, VB, C) &&
      encodeFloatTokenMap(&maps.dd, p.dd, DV, p.heads, layout, VB, C) &&
      encodeBoxMap<T, VB>(&maps.s, p.states, 2, stateRows, stateStride, 1, KB) &&
      encodeFloatMap(&maps.ds, p.dstates, 2, stateRows, stateStride, VB, 1, KB);
  LINAC_REQUIRE(ok, "hopper delta backward: no tensor map for the gradient stage's operands");
  return maps;
}

/// `tokens` = B * T, `slots` the chunk slots of the batch (chunk_slots.cuh). p carries the inputs
/// and gradients; the workspaces are set here.
template <class T, int DK, int DV, class Decay>
void runDeltaBackwardStages(DeltaBackwardParams p, int64_t tokens, int64_t slots,
                            cudaStream_t stream) {
  constexpr int C = kChunk;
  const size_t rows = size_t(tokens) * p.heads;  // token-heads
  const bool wantDg = Decay::kClass == DecayClass::Scalar && p.dg != nullptr;
  constexpr bool kFusable = DK <= 128 && DV <= 128;  // the fused pass holds dS in two warpgroups
  const bool fused = kFusable && p.fused_reverse;
  size_t total = 0;
  auto carve = [&](size_t bytes) {
    const size_t at = total;
    total += (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    return at;
  };
  const size_t oX = carve(size_t(slots) * p.heads * C * C * sizeof(float));
  const size_t oW = carve(rows * DK * sizeof(T));
  const size_t oUD = carve(rows * DV * sizeof(float));
  const size_t oDD = carve(rows * DV * sizeof(float));
  const size_t oS = carve(size_t(slots) * p.heads * DK * DV * sizeof(T));
  const size_t oDS = fused ? 0 : carve(size_t(slots) * p.heads * DK * DV * sizeof(float));
  const size_t oDK = carve(rows * DK * sizeof(float));
  const size_t oDW = carve(rows * DK * sizeof(T));
  constexpr int kKeyBlocks = deltaGradKeyBlocks<DK>();  // stage 4's parts of db and Z
  const size_t oDB = wantDg ? carve(rows * kKeyBlocks * sizeof(float)) : 0;
  const size_t oZ = wantDg ? carve(size_t(slots) * p.heads * kKeyBlocks * sizeof(float)) : 0;
  const Workspace workspace(total, stream);
  uint8_t* ws = workspace.data();
  p.x = reinterpret_cast<float*>(ws + oX);
  p.w = ws + oW;
  p.ud = reinterpret_cast<float*>(ws + oUD);
  p.dd = reinterpret_cast<float*>(ws + oDD);
  p.states = ws + oS;
  p.dstates = fused ? nullptr : reinterpret_cast<float*>(ws + oDS);
  p.dkpart = reinterpret_cast<float*>(ws + oDK);
  p.dw = ws + oDW;
  p.dbpart = wantDg ? reinterpret_cast<float*>(ws + oDB) : nullptr;
  p.zpart = wantDg ? reinterpret_cast<float*>(ws + oZ) : nullptr;
  if (!wantDg) p.dg = nullptr;

  const dim3 chunkGrid(unsigned(slots), p.heads);
  const dim3 gradGrid(unsigned(slots), p.heads, kKeyBlocks);
  if (slots > 0) {
    auto kernel = deltaBwdPrepareKernel<T, DK, DV, Decay>;
    constexpr size_t bytes = DeltaBwdPrepareTiles<T, DK, DV>::kSmemBytes;
    static_assert(bytes <= kMaxSmemPerBlock, "the stage's tiles exceed shared memory");
    setDeltaBwdSmem(kernel, bytes);
    typename DeltaBwdPrepareTiles<T, DK, DV>::Maps maps{};
    const TokenExtent layout = tokenExtent(p);
    constexpr int VB = DeltaBwdPrepareTiles<T, DK, DV>::VB;
    const bool ok = encodeTokenMap<T, DK>(&maps.k, p.k, DK, p.heads, layout, C) &&
                    encodeTokenMap<T, DK>(&maps.q, p.q, DK, p.heads, layout, C) &&
                    encodeTokenMap<T, VB>(&maps.v, p.v, DV, p.heads, layout, C) &&
                    encodeTokenMap<T, VB>(&maps.d_o, p.d_o, DV, p.heads, layout, C);
    LINAC_REQUIRE(ok, "hopper delta backward: no tensor map for the preparation's operands");
    kernel<<<chunkGrid, kWarpgroupThreads, bytes, stream>>>(p, maps);
    LINAC_CUDA_CHECK_LAUNCH("hopper::deltaBwdPrepareKernel");
  }
  // The state passes walk every chunk of a sequence in order, one CTA per (value block, head,
  // sequence); where blocks of kDeltaStateValueBlock columns leave multiprocessors idle (long
  // sequences with few heads: B2 H4 dv 128 is 32 CTAs on 132 SMs), p.narrow_state halves them.
  auto stateGrid = [&](int bv) { return dim3(unsigned(DV / bv), unsigned(p.heads), unsigned(p.num_seqs)); };
  auto forwardState = [&]<int BV>() {
    auto kernel = deltaBwdForwardStateKernel<T, DK, BV, Decay>;
    constexpr size_t bytes = DeltaBwdForwardStateTiles<T, DK, BV>::kSmemBytes;
    static_assert(bytes <= kMaxSmemPerBlock, "the stage's tiles exceed shared memory");
    setDeltaBwdSmem(kernel, bytes);
    kernel<<<stateGrid(BV), kWarpgroupThreads, bytes, stream>>>(p, deltaStateMaps<T, DK, BV>(p));
    LINAC_CUDA_CHECK_LAUNCH("hopper::deltaBwdForwardStateKernel");
  };
  auto reverseState = [&]<int BV>() {
    auto kernel = deltaBwdReverseStateKernel<T, DK, BV, Decay>;
    constexpr size_t bytes = DeltaBwdReverseStateTiles<T, DK, BV>::kSmemBytes;
    static_assert(bytes <= kMaxSmemPerBlock, "the stage's tiles exceed shared memory");
    setDeltaBwdSmem(kernel, bytes);
    kernel<<<stateGrid(BV), kWarpgroupThreads, bytes, stream>>>(p, deltaStateMaps<T, DK, BV>(p));
    LINAC_CUDA_CHECK_LAUNCH("hopper::deltaBwdReverseStateKernel");
  };
  constexpr int kWide = kDeltaStateValueBlock, kNarrow = kWide / 2;
  if (p.narrow_state) forwardState.template operator()<kNarrow>();
  else forwardState.template operator()<kWide>();
  if constexpr (kFusable) {
    if (fused) {  // always: it also writes d_h0 (= d_ht when a sequence has no tokens)
      auto kernel = deltaBwdReverseGradKernel<T, DK, DV, Decay>;
      constexpr size_t bytes = DeltaBwdReverseGradTiles<T, DK, DV>::kSmemBytes;
      static_assert(bytes <= kMaxSmemPerBlock, "the stage's tiles exceed shared memory");
      setDeltaBwdSmem(kernel, bytes);
      kernel<<<dim3(p.heads, p.num_seqs), deltaReverseGradWarpgroups<DK>() * kWarpgroupThreads, bytes,
               stream>>>(p);
      LINAC_CUDA_CHECK_LAUNCH("hopper::deltaBwdReverseGradKernel");
    }
  }
  if (!fused) {  // always: it also writes d_h0 (= d_ht when a sequence has no tokens)
    if (p.narrow_state) reverseState.template operator()<kNarrow>();
    else reverseState.template operator()<kWide>();
  }
  if (slots > 0 && !fused) {
    auto grad = deltaBwdGradKernel<T, DK, Decay>;
    constexpr size_t gradBytes = DeltaBwdGradTiles<T, DK>::kSmemBytes;
    static_assert(gradBytes <= kMaxSmemPerBlock, "the stage's tiles exceed shared memory");
    setDeltaBwdSmem(grad, gradBytes);
    grad<<<gradGrid, kDeltaGradThreads, gradBytes, stream>>>(p, deltaGradMaps<T, DK>(p, slots));
    LINAC_CUDA_CHECK_LAUNCH("hopper::deltaBwdGradKernel");
  }
  if (slots > 0) {
    auto wy = deltaBwdWyKernel<T, DK, DV, Decay>;
    constexpr size_t wyBytes = DeltaBwdWyTiles<T, DK, DV>::kSmemBytes;
    static_assert(wyBytes <= kMaxSmemPerBlock, "the stage's tiles exceed shared memory");
    setDeltaBwdSmem(wy, wyBytes);
    wy<<<chunkGrid, kDeltaWyThreads, wyBytes, stream>>>(p);
    LINAC_CUDA_CHECK_LAUNCH("hopper::deltaBwdWyKernel");
  }
}

}  // namespace linac::kernels::cuda::hopper

// Used inside namespace linac::kernels::cuda::hopper.
#define LINAC_HOPPER_DELTA_BACKWARD_INSTANTIATE(T, DK, DV)                                    \
  template void runDeltaBackwardStages<T, DK, DV, NoDecay>(DeltaBackwardParams, int64_t,      \
                                                           int64_t, cudaStream_t);            \
  template void runDeltaBackwardStages<T, DK, DV, ScalarDecay>(DeltaBackwardParams, int64_t,  \
                                                               int64_t, cudaStream_t);
