// Launches of the Hopper forward stages for one (element type, key dim, decay class); the
// forward_<dtype>_k<dk>.cu files instantiate them so the instantiations compile in parallel.
//   additive: stateOutputKernel, or with p.prepared_scores scoresPrepareKernel (P into a workspace)
//             first
//   delta:    deltaPrepareKernel (W, U, P into a workspace, workspace.h), then stateOutputKernel
//   diagonal: diagonalPrepareKernel (qd, kd, P, decay into a workspace), then stateOutputKernel
#pragma once

#include "../cuda_check.h"
#include "../device_info.h"
#include "../workspace.h"
#include "delta_prepare.cuh"
#include "diagonal_prepare.cuh"
#include "scores_prepare.cuh"
#include "state_output.cuh"

#include <string>

namespace linac::kernels::cuda::hopper {

template <class Kernel>
void setSmem(Kernel kernel, size_t bytes) {
  LINAC_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <class T, int DK, int BV, class Decay, bool kDelta, bool kLate = false, bool kOverlap = false>
auto stateOutputReady() {
  auto kernel = stateOutputKernel<T, DK, BV, Decay, kDelta, kLate, kOverlap>;
  setSmem(kernel, StateOutputTilesFor<T, DK, BV, Decay, kDelta, kLate>::kSmemBytes);
  return kernel;
}

/// The state stage's tensor maps (tma.cuh): q, k, w and v / u as (width, heads, tokens, sequences)
/// (a packed batch is one sequence of all its tokens), P as its [slots H C, C] rows.
template <class T, int DK, int BV, class Decay, bool kDelta, bool kLate>
auto stateOutputMaps(const ForwardParams& p) {
  using Tiles = StateOutputTilesFor<T, DK, BV, Decay, kDelta, kLate>;
  constexpr bool kDiag = Decay::kClass == DecayClass::Diagonal;
  typename Tiles::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  auto rows = [&](CUtensorMap* map, const void* base, int64_t width, auto encode) {
    return encode(map, base, width, p.heads, layout, kChunk);
  };
  bool ok = rows(&maps.q, kDiag ? p.qd : p.q, DK, encodeTokenMap<T, DK>) &&
            rows(&maps.k, kDiag ? p.kd : p.k, DK, encodeTokenMap<T, DK>) &&
            (!kDelta || rows(&maps.w, p.w, DK, encodeTokenMap<T, DK>)) &&
            rows(&maps.xin, kDelta ? p.u : p.v, p.value_dim, encodeTokenMap<T, BV>);
  if constexpr (Tiles::kLoadP) {
    const int64_t dims[2] = {kChunk, p.slots * p.heads * kChunk}, strides[1] = {kChunk};
    ok = ok && encodeBoxMap<T, kChunk>(&maps.p, p.pd, 2, dims, strides, 1, kChunk);
  }
  LINAC_REQUIRE(ok, "hopper forward: no tensor map for the state stage's operands (a driver without "
                    "cuTensorMapEncodeTiled, a tensor not 16-byte aligned, or more than 2^31 rows)");
  return maps;
}

/// The state stage for one value block; the delta rule's in the overlapped order where p.overlap
/// asks for it (state_output.cuh, kOverlap).
template <class T, int DK, int BV, class Decay, bool kDelta, bool kLate = false>
void launchStateOutputBlock(const ForwardParams& p, cudaStream_t stream) {
  const dim3 grid(p.value_dim / BV, p.heads, p.num_seqs);
  constexpr size_t bytes = StateOutputTilesFor<T, DK, BV, Decay, kDelta, kLate>::kSmemBytes;
  const auto maps = stateOutputMaps<T, DK, BV, Decay, kDelta, kLate>(p);
  if constexpr (kDelta) {
    if (p.overlap) {
      stateOutputReady<T, DK, BV, Decay, true, kLate, true>()<<<grid, kWarpgroupThreads, bytes, stream>>>(p, maps);
      LINAC_CUDA_CHECK_LAUNCH("hopper::stateOutputKernel (overlapped)");
      return;
    }
  }
  stateOutputReady<T, DK, BV, Decay, kDelta, kLate>()<<<grid, kWarpgroupThreads, bytes, stream>>>(p, maps);
  LINAC_CUDA_CHECK_LAUNCH("hopper::stateOutputKernel");
}

template <class T, int DK, int BV, class Decay, bool kDelta, bool kLate>
int residentPerSm() {
  static const int blocks = [] {
    int n = 0;
    LINAC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, stateOutputReady<T, DK, BV, Decay, kDelta, kLate>(), kWarpgroupThreads,
        StateOutputTilesFor<T, DK, BV, Decay, kDelta, kLate>::kSmemBytes));
    return n;
  }();
  return blocks;
}

/// The state stage with BV = 32 where every CTA of the smaller blocks is resident at once (two per
/// SM: twice the warps to hide each other's latency), else BV = 64; with p.late_loads (the delta
/// rule, forward.cu's choice) BV = 32 with one stage of q / w where those all fit. At dk 256 the state's
/// accumulator is DK x BV fp32 over one warpgroup (64 registers a thread at BV = 32, 128 at
/// BV = 64, where ptxas spills ~1 KB), so BV = 32 always; and two stages of q, k and w (192 KB)
/// leave no room for the value tiles, so the delta rule keeps one stage of q / w (late loads)
/// whatever the decay (178 KB with P's two stages: one CTA per SM). With p.thin_state, BV = 16
/// where blocks of 32 make fewer CTAs than SMs (long sequences with few heads: B2 H4 dv 128 is 32
/// CTAs on 132 SMs, each walking its chain of chunks).
template <class T, int DK, class Decay, bool kDelta>
void launchStateOutput(const ForwardParams& p, cudaStream_t stream) {
  constexpr int kNarrow = kNarrowValueBlock;
  if constexpr (DK > 128) {
    launchStateOutputBlock<T, DK, kNarrow, Decay, kDelta, kDelta>(p, stream);
  } else {
    const int smCount = multiprocessorCount();
    const int64_t narrowCtas = int64_t(p.value_dim / kNarrow) * p.heads * p.num_seqs;
    if (p.thin_state && narrowCtas < smCount) {
      if constexpr (kDelta) {
        if (p.late_loads) {
          launchStateOutputBlock<T, DK, kThinValueBlock, Decay, true, true>(p, stream);
          return;
        }
      }
      launchStateOutputBlock<T, DK, kThinValueBlock, Decay, kDelta>(p, stream);
      return;
    }
    if constexpr (kDelta) {
      if (p.late_loads &&
          narrowCtas <= int64_t(residentPerSm<T, DK, kNarrow, Decay, true, true>()) * smCount) {
        launchStateOutputBlock<T, DK, kNarrow, Decay, true, true>(p, stream);
        return;
      }
    }
    if (narrowCtas <= int64_t(residentPerSm<T, DK, kNarrow, Decay, kDelta, false>()) * smCount)
      launchStateOutputBlock<T, DK, kNarrow, Decay, kDelta>(p, stream);
    else
      launchStateOutputBlock<T, DK, kValueBlock, Decay, kDelta>(p, stream);
  }
}

template <class T, int DK, int DV, class Decay>
void launchPrepare(const ForwardParams& p, const PrepareOutputs& out, int64_t slots,
                   cudaStream_t stream) {
  using Tiles = DeltaPrepareTiles<T, DK, DV>;
  auto kernel = deltaPrepareKernel<T, DK, DV, Decay>;
  constexpr size_t bytes = Tiles::kSmemBytes;
  typename Tiles::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  const bool ok = encodeTokenMap<T, DK>(&maps.q, p.q, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, DK>(&maps.k, p.k, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, Tiles::kValueBlock>(&maps.v, p.v, DV, p.heads, layout, kChunk);
  LINAC_REQUIRE(ok, "hopper forward: no tensor map for the preparation's operands");
  setSmem(kernel, bytes);
  kernel<<<dim3(unsigned(slots), p.heads), kWarpgroupThreads, bytes, stream>>>(p, out, maps);
  LINAC_CUDA_CHECK_LAUNCH("hopper::deltaPrepareKernel");
}

template <class T, int DK, class Decay>
void launchPrepareDV(const ForwardParams& p, const PrepareOutputs& out, int64_t slots,
                     cudaStream_t stream) {
  switch (p.value_dim) {
    case 64: launchPrepare<T, DK, 64, Decay>(p, out, slots, stream); break;
    case 128: launchPrepare<T, DK, 128, Decay>(p, out, slots, stream); break;
    case 256: launchPrepare<T, DK, 256, Decay>(p, out, slots, stream); break;
    case 512: launchPrepare<T, DK, 512, Decay>(p, out, slots, stream); break;
    default: LINAC_REQUIRE(false, "hopper forward: value_dim " + std::to_string(p.value_dim));
  }
}

/// The additive rule with P from scores_prepare.cuh: the chunks' scores into a workspace, then the
/// state stage loading them.
template <class T, int DK, class Decay>
void runPreparedScores(ForwardParams p, cudaStream_t stream) {
  using Tiles = ScoresPrepareTiles<T, DK>;
  const Workspace workspace(size_t(p.slots) * p.heads * kChunk * kChunk * sizeof(T), stream);
  p.pd = workspace.data();
  typename Tiles::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  const bool ok = encodeTokenMap<T, DK>(&maps.q, p.q, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, DK>(&maps.k, p.k, DK, p.heads, layout, kChunk);
  LINAC_REQUIRE(ok, "hopper forward: no tensor map for the scores' operands");
  auto kernel = scoresPrepareKernel<T, DK, Decay>;
  setSmem(kernel, Tiles::kSmemBytes);
  kernel<<<dim3(unsigned(p.slots), p.heads), kWarpgroupThreads, Tiles::kSmemBytes, stream>>>(
      p, workspace.data(), maps);
  LINAC_CUDA_CHECK_LAUNCH("hopper::scoresPrepareKernel");
  launchStateOutput<T, DK, WithPreparedScores<Decay>, false>(p, stream);
}

/// The forward for one (T, DK, Decay).
template <class T, int DK, class Decay>
void runStages(bool delta, ForwardParams p, cudaStream_t stream) {
  const int64_t tokens = p.tokens, slots = p.slots;
  if (!delta) {
    if (p.prepared_scores) runPreparedScores<T, DK, Decay>(p, stream);
    else launchStateOutput<T, DK, Decay, false>(p, stream);
    return;
  }
  const size_t wBytes = size_t(tokens) * p.heads * DK * sizeof(T);
  const size_t uBytes = size_t(tokens) * p.heads * p.value_dim * sizeof(T);
  const size_t pBytes = size_t(slots) * p.heads * kChunk * kChunk * sizeof(T);
  const Workspace workspace(wBytes + uBytes + pBytes, stream);
  uint8_t* ws = workspace.data();
  const PrepareOutputs out{ws, ws + wBytes, ws + wBytes + uBytes};
  p.w = out.w;
  p.u = out.u;
  p.pd = out.p;
  launchPrepareDV<T, DK, Decay>(p, out, slots, stream);
  launchStateOutput<T, DK, Decay, true>(p, stream);
}

/// The additive rule with a diagonal decay (opt-in, hopper_forward.h): the per-channel factors once
/// per chunk and head, then the state stage on them.
template <class T, int DK, bool kExclusive>
void runDiagonalStages(ForwardParams p, cudaStream_t stream) {
  constexpr int C = kChunk;
  const int64_t tokens = p.tokens, slots = p.slots;
  const size_t keyBytes = size_t(tokens) * p.heads * DK * sizeof(T);
  const size_t pBytes = size_t(slots) * p.heads * C * C * sizeof(T);
  const size_t decayBytes = size_t(slots) * p.heads * DK * sizeof(float);
  const Workspace workspace(2 * keyBytes + pBytes + decayBytes, stream);
  uint8_t* ws = workspace.data();
  const DiagonalOutputs out{ws, ws + keyBytes, ws + 2 * keyBytes,
                            reinterpret_cast<float*>(ws + 2 * keyBytes + pBytes)};
  p.qd = out.qd;
  p.kd = out.kd;
  p.pd = out.p;
  p.decay = out.decay;
  auto prepare = diagonalPrepareKernel<T, DK, kExclusive>;
  constexpr size_t bytes = sizeof(DiagonalPrepareSmem<T, DK>);
  setSmem(prepare, bytes);
  prepare<<<dim3(unsigned(slots), p.heads), kDiagonalPrepareThreads, bytes, stream>>>(p, out);
  LINAC_CUDA_CHECK_LAUNCH("hopper::diagonalPrepareKernel");
  launchStateOutput<T, DK, PrecomputedDiagonal, false>(p, stream);
}

/// Whether this build carries sm_90a machine code for the stages (an sm_80-only build, or a
/// Hopper device running PTX compiled for an older target, does not).
template <class T, int DK>
bool hasHopperCode() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, stateOutputKernel<T, DK, kValueBlock, NoDecay, false>) !=
      cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90 && attr.ptxVersion == 90;
}

}  // namespace linac::kernels::cuda::hopper

// Used inside namespace linac::kernels::cuda::hopper: every decay class's stages for one element
// type and key dim.
#define LINAC_HOPPER_FORWARD_INSTANTIATE(T, DK)                                                \
  template void runStages<T, DK, NoDecay>(bool, ForwardParams, cudaStream_t);                   \
  template void runStages<T, DK, FixedDecay>(bool, ForwardParams, cudaStream_t);                \
  template void runStages<T, DK, ScalarDecay>(bool, ForwardParams, cudaStream_t);               \
  template void runDiagonalStages<T, DK, false>(ForwardParams, cudaStream_t);                   \
  template void runDiagonalStages<T, DK, true>(ForwardParams, cudaStream_t);                    \
  template bool hasHopperCode<T, DK>();
