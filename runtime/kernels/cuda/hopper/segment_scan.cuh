// Hopper forward of the additive rule (decay none / fixed / scalar) in segments
// (forward_split.cuh, runSegmentedStages): each sequence of a padded batch is cut into S segments
// of L tokens (L a multiple of the chunk), which run the state pass from zero state as the
// pseudo-sequences n' = b S + j of a packed batch. With G_j the segment's total log-decay, E_j its
// end state from zero, and g_c the log-decay from its start to chunk c's start:
//   S_start(b S)         = h0_b                  (zero without h0)
//   S_start(b S + j + 1) = exp(G_j) S_start(b S + j) + E_j,       ht_b = the value after the last
//   S_c                  = S_c^local + exp(g_c) S_start(segment of c)
// so the output stage (chunk_output.cuh, kSegmented) adds scale e^{b_t} exp(g_c) Q S_start to its
// Q S_c^local. The chain of chunks is L / C long instead of T / C; the scan over segments is S
// steps of an elementwise update.
// These kernels: the pseudo-sequences' bounds, the log-decays g_c and G_j, and the scan.
#pragma once

#include "../chunk_slots.cuh"
#include "chunk_decay.cuh"

#include <cstdint>

namespace linac::kernels::cuda::hopper {

constexpr int kSegmentThreads = 256;  // threads per CTA of the decay and scan kernels

/// cu[n'] for n' = b S + j: b T + min(j L, T); cu[B S] = B T (B S + 1 threads in all). Static: each
/// translation unit that includes this header (forward_split_<dtype>.cu) keeps its own.
static __global__ void segmentBoundsKernel(int64_t* cu, int batch, int segments, int64_t seqLen, int64_t segLen) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  const int count = batch * segments;
  if (i > count) return;
  if (i == count) {
    cu[i] = int64_t(batch) * seqLen;
    return;
  }
  const int64_t start = int64_t(i % segments) * segLen;
  cu[i] = int64_t(i / segments) * seqLen + (start < seqLen ? start : seqLen);
}

/// Sum of the log-decays of head h over tokens [tok0, tok0 + rows) (g as chunk_decay.cuh reads it).
template <class Decay>
__device__ float logDecaySum(const float* g, int64_t tok0, int rows, int h, int H) {
  if constexpr (Decay::kClass == DecayClass::Fixed) return float(rows) * g[h];
  float sum = 0.f;
  if constexpr (Decay::kClass == DecayClass::Scalar)
    for (int t = 0; t < rows; ++t) sum += g[(tok0 + t) * H + h];
  return sum;
}

/// One CTA per (pseudo-sequence n', head h): chunkStart[(coff + c) H + h] = g_c, the log-decay
/// from the segment's start to chunk c's start, for each of its chunks, and total[n' H + h] = G_j.
/// P carries the pseudo-sequences (cu_seqlens, num_seqs; chunk_slots.cuh's seqInfo).
template <class Decay, class P>
__global__ void __launch_bounds__(kSegmentThreads)
    segmentDecayKernel(const P p, const float* g, float* chunkStart, float* total) {
  __shared__ float scan[kSegmentThreads];
  const int n = blockIdx.x, h = blockIdx.y, H = p.heads, tid = threadIdx.x;
  int64_t bos, len, coff;
  seqInfo<kChunk>(p, n, bos, len, coff);
  const int chunks = int((len + kChunk - 1) / kChunk);
  float carry = 0.f;  // the log-decay of the tiles of chunks before this one
  for (int c0 = 0; c0 < chunks; c0 += kSegmentThreads) {
    const int c = c0 + tid;
    const int rows = c < chunks ? int(len - int64_t(c) * kChunk < kChunk ? len - int64_t(c) * kChunk : kChunk) : 0;
    const float own = logDecaySum<Decay>(g, bos + int64_t(c) * kChunk, rows, h, H);
    // inclusive scan of the tile's chunk sums (Hillis-Steele)
    scan[tid] = own;
    __syncthreads();
    for (int d = 1; d < kSegmentThreads; d <<= 1) {
      const float add = tid >= d ? scan[tid - d] : 0.f;
      __syncthreads();
      scan[tid] += add;
      __syncthreads();
    }
    if (c < chunks) chunkStart[(coff + c) * H + h] = carry + scan[tid] - own;
    carry += scan[kSegmentThreads - 1];
    __syncthreads();  // every thread has read the tile's total before the next tile's scan
  }
  if (tid == 0) total[int64_t(n) * H + h] = carry;
}

/// The scan over segments, elementwise: one CTA per (1,024 elements of the [dk, dv] state, head,
/// sequence b), four elements a thread. Writes S_start of every segment in the input dtype (the
/// output stage's wgmma operand), [B S, H, dk, dv], and ht (fp32) when non-null.
template <class T>
__global__ void __launch_bounds__(kSegmentThreads)
    segmentStartKernel(const float* h0 /* [B, H, dk, dv] or null */, const float* ends /* [B S, H, dk, dv] */,
                       const float* total /* [B S, H] */, T* starts /* [B S, H, dk, dv] */,
                       float* ht /* [B, H, dk, dv] or null */, int segments, int heads, int64_t stateSize) {
  constexpr int kPerThread = 4;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t e0 = (int64_t(blockIdx.x) * kSegmentThreads + threadIdx.x) * kPerThread;
  if (e0 >= stateSize) return;
  const int64_t own = (int64_t(b) * heads + h) * stateSize + e0;  // [B, H, dk, dv]
  float run[kPerThread];
  for (int i = 0; i < kPerThread; ++i) run[i] = h0 ? h0[own + i] : 0.f;
  for (int j = 0; j < segments; ++j) {
    const int64_t n = int64_t(b) * segments + j;
    const int64_t at = (n * heads + h) * stateSize + e0;
    for (int i = 0; i < kPerThread; ++i) starts[at + i] = T(run[i]);
    const float decay = __expf(total[n * heads + h]);
    for (int i = 0; i < kPerThread; ++i) run[i] = decay * run[i] + ends[at + i];
  }
  if (ht)
    for (int i = 0; i < kPerThread; ++i) ht[own + i] = run[i];
}

}  // namespace linac::kernels::cuda::hopper
