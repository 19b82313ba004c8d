// The Hopper forward of the additive rule (decay none / fixed / scalar) in its split form, for
// one (element type, key dim, decay class); forward_split_<dtype>.cu instantiate it:
//   state pass:    stateScanKernel, forward direction (state_scan.cuh): S_c for every chunk slot
//                  into a [slots, H, dk, dv] workspace in the input dtype, and ht
//   output stage:  chunkOutputKernel (chunk_output.cuh), one CTA per (chunk slot, head, value
//                  block of 64)
// The fused state stage (state_output.cuh) forms each chunk's output on its serial chain of
// chunks; this form's chain carries K^T V alone. In segments (runSegmentedStages, a padded batch):
// the same two stages over the segments of every sequence as a packed batch of pseudo-sequences
// run from zero state, with the scan over segments between them (segment_scan.cuh), so the chain
// is a segment long; or (runSegmentedFusedStages) the fused stage itself over the segments, its
// outputs corrected by the segments' start states afterwards (segment_correct.cuh). forward.cu
// says when each runs.
#pragma once

#include "../cuda_check.h"
#include "../device_info.h"
#include "../workspace.h"
#include "backward_params.h"
#include "chunk_output.cuh"
#include "env_switch.h"
#include "forward_params.h"
#include "segment_correct.cuh"
#include "segment_scan.cuh"
#include "state_scan.cuh"

#include <algorithm>

namespace linac::kernels::cuda::hopper {

/// The fused forward (forward_stages.cuh; forward_<dtype>_k<dk>.cu instantiate it).
template <class T, int DK, class Decay>
void runStages(bool delta, ForwardParams p, cudaStream_t stream);

/// The forward state pass (state_scan.cuh) in value blocks of BV columns.
template <class T, int DK, int BV, class Decay>
void launchSplitStatePass(const BackwardParams& s, cudaStream_t stream) {
  using Tiles = StateScanTiles<T, DK, BV>;
  auto kernel = stateScanKernel<T, DK, BV, Decay, false>;
  LINAC_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tiles::kSmemBytes)));
  kernel<<<dim3(s.value_dim / BV, s.heads, s.num_seqs), kWarpgroupThreads, Tiles::kSmemBytes, stream>>>(
      s, stateScanMaps<T, DK, BV>(s, s.k, s.v));
  LINAC_CUDA_CHECK_LAUNCH("hopper::stateScanKernel (split forward)");
}

/// The output stage over p's chunk slots, S_c from `states` ([slots, H, dk, dv]); kSegmented: plus
/// exp(g_c) Q S_start, S_start from `starts` ([N, H, dk, dv], N = p's sequences) and g_c from
/// chunkStart ([slots, H]).
template <class T, int DK, class Decay, bool kSegmented>
void launchChunkOutput(const ForwardParams& p, const void* states, const void* starts, const float* chunkStart,
                       cudaStream_t stream) {
  using Tiles = ChunkOutputTiles<T, DK, kSegmented>;
  typename Tiles::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  const int64_t stateDims[2] = {p.value_dim, p.slots * p.heads * DK}, stateStride[1] = {p.value_dim};
  const int64_t startDims[2] = {p.value_dim, int64_t(p.num_seqs) * p.heads * DK};
  const bool ok = encodeTokenMap<T, DK>(&maps.q, p.q, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, DK>(&maps.k, p.k, DK, p.heads, layout, kChunk) &&
                  encodeTokenMap<T, Tiles::VB>(&maps.v, p.v, p.value_dim, p.heads, layout, kChunk) &&
                  encodeBoxMap<T, Tiles::VB>(&maps.s, states, 2, stateDims, stateStride, 1, DK) &&
                  (!kSegmented || encodeBoxMap<T, Tiles::VB>(&maps.start, starts, 2, startDims, stateStride, 1, DK));
  LINAC_REQUIRE(ok, "hopper forward: no tensor map for the output stage's operands");
  auto kernel = chunkOutputKernel<T, DK, Decay, kSegmented>;
  LINAC_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tiles::kSmemBytes)));
  const dim3 grid(unsigned(p.slots), p.heads, unsigned(p.value_dim / Tiles::VB));
  kernel<<<grid, kWarpgroupThreads, Tiles::kSmemBytes, stream>>>(p, chunkStart, maps);
  LINAC_CUDA_CHECK_LAUNCH("hopper::chunkOutputKernel");
}

/// The state pass's parameters for p's sequences (h0, ht as p has them).
template <int DK>
BackwardParams statePassParams(const ForwardParams& p, void* states) {
  BackwardParams s{};
  s.q = p.q;
  s.k = p.k;
  s.v = p.v;
  s.g = p.g;
  s.h0 = p.h0;
  s.ht = p.ht;
  s.states = states;
  s.cu_seqlens = p.cu_seqlens;
  s.seq_len = p.seq_len;
  s.chunks_per_seq = p.chunks_per_seq;
  s.num_seqs = p.num_seqs;
  s.heads = p.heads;
  s.key_dim = DK;
  s.value_dim = p.value_dim;
  s.scale = p.scale;
  return s;
}

/// The state pass over p's sequences, value blocks of kScanValueBlock, or of kThinValueBlock where
/// those make fewer CTAs than SMs (the chain of chunks is the pass's time there).
template <class T, int DK, class Decay>
void runStatePass(const BackwardParams& s, cudaStream_t stream) {
  if (int64_t(s.value_dim / kScanValueBlock) * s.heads * s.num_seqs < multiprocessorCount())
    launchSplitStatePass<T, DK, kThinValueBlock, Decay>(s, stream);
  else
    launchSplitStatePass<T, DK, kScanValueBlock, Decay>(s, stream);
}

template <class T, int DK, class Decay>
void runSplitStages(ForwardParams p, cudaStream_t stream) {
  LINAC_REQUIRE(p.value_dim % kOutputValueBlock == 0, "hopper split forward: dv in whole blocks of 64");
  const size_t stateBytes = size_t(p.slots) * p.heads * DK * p.value_dim * sizeof(T);
  const Workspace workspace(stateBytes, stream);

  const BackwardParams s = statePassParams<DK>(p, workspace.data());
  runStatePass<T, DK, Decay>(s, stream);
  launchChunkOutput<T, DK, Decay, false>(p, s.states, nullptr, nullptr, stream);
}

/// Segments a sequence: enough that the fused state stage's CTAs of kNarrowValueBlock columns,
/// one per (segment, head, value block), would fill the SMs twice over; at least two, at most one
/// a chunk (p.chunks_per_seq >= 2). On an H100 this count (9 at B2 T16384 H4 D128: a state pass of
/// 288 CTAs of 32 columns on chains of 29 chunks) ran the RetNet forward in 0.257 ms, where 16
/// segments (512 CTAs, chains of 16) took 0.303 (bench/NOTES.md, session 36).
/// LINAC_HOPPER_SEGMENT_COUNT=N pins the count (env_switch.h).
inline int segmentCount(const ForwardParams& p) {
  const int64_t perSegment = int64_t(p.value_dim / kNarrowValueBlock) * p.heads * p.num_seqs;
  const int64_t wanted = segmentCountPinned((2 * multiprocessorCount() + perSegment - 1) / perSegment);
  return int(std::clamp<int64_t>(wanted, 2, p.chunks_per_seq));
}

/// A padded batch's sequences in segments of whole chunks (segmentCount; none empty), the
/// pseudo-sequences n' = b S + j of a packed batch over the same token rows, and the bytes of the
/// scan's buffers (16-byte aligned each).
struct SegmentPlan {
  int segments;      // S, a sequence's
  int64_t segLen;    // tokens a segment
  int pseudo;        // B S
  int64_t slots;     // the packed batch's chunk slots
  int64_t stateSize; // dk dv
  size_t cuBytes, endBytes, startBytes, chunkStartBytes, totalBytes;
  size_t bytes() const { return cuBytes + endBytes + startBytes + chunkStartBytes + totalBytes; }
};

template <class T, int DK>
SegmentPlan planSegments(const ForwardParams& p) {
  LINAC_REQUIRE(p.cu_seqlens == nullptr && p.chunks_per_seq > 1,
                "hopper segmented forward: a padded batch of at least two chunks a sequence");
  LINAC_REQUIRE(p.value_dim % kOutputValueBlock == 0, "hopper segmented forward: dv in whole blocks of 64");
  auto aligned = [](size_t bytes) { return (bytes + 15) / 16 * 16; };
  const int wanted = segmentCount(p);
  const int64_t chunksPerSegment = (p.chunks_per_seq + wanted - 1) / wanted;
  SegmentPlan plan{};
  plan.segments = int((p.chunks_per_seq + chunksPerSegment - 1) / chunksPerSegment);
  plan.segLen = chunksPerSegment * kChunk;
  plan.pseudo = p.num_seqs * plan.segments;
  plan.slots = (p.tokens + kChunk - 1) / kChunk + plan.pseudo;
  plan.stateSize = int64_t(DK) * p.value_dim;
  const size_t states = size_t(plan.pseudo) * p.heads * plan.stateSize;
  plan.cuBytes = aligned(size_t(plan.pseudo + 1) * sizeof(int64_t));
  plan.endBytes = aligned(states * sizeof(float));
  plan.startBytes = aligned(states * sizeof(T));
  plan.chunkStartBytes = aligned(size_t(plan.slots) * p.heads * sizeof(float));
  plan.totalBytes = aligned(size_t(plan.pseudo) * p.heads * sizeof(float));
  return plan;
}

/// The scan's buffers in a workspace of plan.bytes() at `at`.
template <class T>
struct SegmentBuffers {
  int64_t* cu;        // [B S + 1] the pseudo-sequences' bounds
  float* ends;        // [B S, H, dk, dv] each segment's end state from zero
  T* starts;          // [B S, H, dk, dv] each segment's start state
  float* chunkStart;  // [slots, H] g_c, the log-decay from a chunk's segment start to it
  float* total;       // [B S, H] G_j, a segment's log-decay

  SegmentBuffers(const SegmentPlan& plan, uint8_t* at) {
    cu = reinterpret_cast<int64_t*>(at);
    at += plan.cuBytes;
    ends = reinterpret_cast<float*>(at);
    at += plan.endBytes;
    starts = reinterpret_cast<T*>(at);
    at += plan.startBytes;
    chunkStart = reinterpret_cast<float*>(at);
    at += plan.chunkStartBytes;
    total = reinterpret_cast<float*>(at);
  }
};

/// p over the pseudo-sequences (bounds `cu`, written by launchSegmentBounds), from zero state.
inline ForwardParams pseudoSequences(const ForwardParams& p, const SegmentPlan& plan, const int64_t* cu) {
  ForwardParams q = p;
  q.cu_seqlens = cu;
  q.num_seqs = plan.pseudo;
  q.seq_len = p.tokens;
  q.slots = plan.slots;
  q.h0 = nullptr;
  q.ht = nullptr;
  return q;
}

/// Static, as the kernel it launches (each translation unit keeps its own).
static void launchSegmentBounds(const ForwardParams& p, const SegmentPlan& plan, int64_t* cu, cudaStream_t stream) {
  segmentBoundsKernel<<<(plan.pseudo + 1 + kSegmentThreads - 1) / kSegmentThreads, kSegmentThreads, 0, stream>>>(
      cu, p.num_seqs, plan.segments, p.seq_len, plan.segLen);
  LINAC_CUDA_CHECK_LAUNCH("hopper::segmentBoundsKernel");
}

/// Once every segment's end state is in buf.ends: g_c and G_j (segmentDecayKernel), then the scan
/// over segments for their start states and p.ht (segmentStartKernel).
template <class T, class Decay>
void launchSegmentScan(const ForwardParams& p, const ForwardParams& q, const SegmentPlan& plan,
                       const SegmentBuffers<T>& buf, cudaStream_t stream) {
  segmentDecayKernel<Decay><<<dim3(plan.pseudo, p.heads), kSegmentThreads, 0, stream>>>(q, p.g, buf.chunkStart,
                                                                                        buf.total);
  LINAC_CUDA_CHECK_LAUNCH("hopper::segmentDecayKernel");
  const unsigned blocks = unsigned((plan.stateSize + 4 * kSegmentThreads - 1) / (4 * kSegmentThreads));
  segmentStartKernel<T><<<dim3(blocks, p.heads, p.num_seqs), kSegmentThreads, 0, stream>>>(
      p.h0, buf.ends, buf.total, buf.starts, p.ht, plan.segments, p.heads, plan.stateSize);
  LINAC_CUDA_CHECK_LAUNCH("hopper::segmentStartKernel");
}

/// The forward in segments of each sequence (planSegments): the state pass over them from zero
/// (every chunk's local state and each segment's end), the scan, then the output stage adding
/// e^{g_c} Q S_start. A padded batch of at least two chunks a sequence (forward.cu says when).
template <class T, int DK, class Decay>
void runSegmentedStages(ForwardParams p, cudaStream_t stream) {
  const SegmentPlan plan = planSegments<T, DK>(p);
  const size_t localBytes = size_t(plan.slots) * p.heads * plan.stateSize * sizeof(T);
  const Workspace workspace(plan.bytes() + localBytes, stream);
  const SegmentBuffers<T> buf(plan, workspace.data());
  void* local = workspace.data() + plan.bytes();
  launchSegmentBounds(p, plan, buf.cu, stream);
  const ForwardParams q = pseudoSequences(p, plan, buf.cu);
  BackwardParams s = statePassParams<DK>(q, local);
  s.ht = buf.ends;
  runStatePass<T, DK, Decay>(s, stream);
  launchSegmentScan<T, Decay>(p, q, plan, buf, stream);
  launchChunkOutput<T, DK, Decay, true>(q, local, buf.starts, buf.chunkStart, stream);
}

/// The fused form in segments (LINAC_HOPPER_SEGMENTED_FUSED=1, forward.cu; written in session 36,
/// not yet run on a GPU): the fused state-and-output stage with its prepared scores (no S_c
/// written) over the same segments from zero state, each one's end state as its ht; the scan;
/// then segmentCorrectKernel adds scale e^{g_c + b} Q S_start to every chunk's output.
template <class T, int DK, class Decay>
void runSegmentedFusedStages(ForwardParams p, cudaStream_t stream) {
  const SegmentPlan plan = planSegments<T, DK>(p);
  const Workspace workspace(plan.bytes(), stream);
  const SegmentBuffers<T> buf(plan, workspace.data());
  launchSegmentBounds(p, plan, buf.cu, stream);
  ForwardParams q = pseudoSequences(p, plan, buf.cu);
  q.ht = buf.ends;
  q.prepared_scores = true;
  q.late_loads = false;
  q.overlap = false;
  runStages<T, DK, Decay>(false, q, stream);
  launchSegmentScan<T, Decay>(p, q, plan, buf, stream);

  using Tiles = SegmentCorrectTiles<T, DK>;
  typename Tiles::Maps maps{};
  const int64_t startDims[2] = {p.value_dim, int64_t(plan.pseudo) * p.heads * DK}, startStride[1] = {p.value_dim};
  const bool ok = encodeTokenMap<T, DK>(&maps.q, p.q, DK, p.heads, tokenExtent(q), kChunk) &&
                  encodeBoxMap<T, Tiles::VB>(&maps.start, buf.starts, 2, startDims, startStride, 1, DK);
  LINAC_REQUIRE(ok, "hopper forward: no tensor map for the segments' correction");
  auto kernel = segmentCorrectKernel<T, DK, Decay>;
  LINAC_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tiles::kSmemBytes)));
  const dim3 grid(unsigned(plan.slots), p.heads, unsigned(p.value_dim / Tiles::VB));
  kernel<<<grid, kWarpgroupThreads, Tiles::kSmemBytes, stream>>>(q, plan.segments, p.h0 != nullptr, buf.chunkStart,
                                                                  maps);
  LINAC_CUDA_CHECK_LAUNCH("hopper::segmentCorrectKernel");
}

}  // namespace linac::kernels::cuda::hopper

// Used inside namespace linac::kernels::cuda::hopper: the split form at every key dim and decay
// class for one element type.
#define LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE_DK(T, DK)                                     \
  template void runSplitStages<T, DK, NoDecay>(ForwardParams, cudaStream_t);                  \
  template void runSplitStages<T, DK, FixedDecay>(ForwardParams, cudaStream_t);               \
  template void runSplitStages<T, DK, ScalarDecay>(ForwardParams, cudaStream_t);              \
  template void runSegmentedStages<T, DK, NoDecay>(ForwardParams, cudaStream_t);              \
  template void runSegmentedStages<T, DK, FixedDecay>(ForwardParams, cudaStream_t);           \
  template void runSegmentedStages<T, DK, ScalarDecay>(ForwardParams, cudaStream_t);         \
  template void runSegmentedFusedStages<T, DK, NoDecay>(ForwardParams, cudaStream_t);         \
  template void runSegmentedFusedStages<T, DK, FixedDecay>(ForwardParams, cudaStream_t);      \
  template void runSegmentedFusedStages<T, DK, ScalarDecay>(ForwardParams, cudaStream_t);
#define LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE(T)    \
  LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE_DK(T, 64)   \
  LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE_DK(T, 128)  \
  LINAC_HOPPER_SPLIT_FORWARD_INSTANTIATE_DK(T, 256)
