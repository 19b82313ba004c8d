// Pieces the tensor-core chunkwise backward paths share (chunk_backward_additive.cu and
// chunk_backward_fixed_dg.cu, chunk_backward_diagonal*.cu, chunk_backward_delta*.cu): the
// chunk-slot map for packed varlen batches, asynchronous fp32 tile copies into shared memory, the
// in-chunk log-decay cumsum (in double) and the fast / precise exp switch.
//
// Chunk slots: per-chunk kernels launch one CTA per chunk slot. Sequence n owns slots
// [coff_n, coff_n + ceil(len_n / C)) with coff_n = n * ceil(T / C) for a padded batch and
// coff_n = floor(bos_n / C) + n for varlen (cu_seqlens): disjoint, and at most
// ceil(total / C) + N slots in all. Slots no chunk occupies exit at once.
#pragma once

#include <cstdint>

namespace linac::kernels::cuda {

/// Sequence n of a parameter block P (cu_seqlens, seq_len, chunks_per_seq): first token, length
/// and first chunk slot.
template <int C, typename P>
__device__ __forceinline__ void seqInfo(const P& p, int n, int64_t& bos, int64_t& len, int64_t& coff) {
  if (p.cu_seqlens) {
    bos = p.cu_seqlens[n];
    len = p.cu_seqlens[n + 1] - bos;
    coff = bos / C + n;
  } else {
    bos = int64_t(n) * p.seq_len;
    len = p.seq_len;
    coff = int64_t(n) * p.chunks_per_seq;
  }
}

/// Chunk slot -> (sequence n, its first token, length, chunk within it, first slot). False for
/// slots no chunk occupies.
template <int C, typename P>
__device__ __forceinline__ bool slotToChunk(const P& p, int64_t slot, int& n, int64_t& bos, int64_t& len,
                                            int64_t& chunk, int64_t& coff) {
  if (p.cu_seqlens) {  // largest n with floor(cu[n] / C) + n <= slot (strictly increasing in n)
    int lo = 0, hi = p.num_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.cu_seqlens[mid] / C + mid <= slot) lo = mid;
      else hi = mid - 1;
    }
    n = lo;
  } else {
    n = int(slot / p.chunks_per_seq);
  }
  seqInfo<C>(p, n, bos, len, coff);
  chunk = slot - coff;
  return chunk >= 0 && chunk * C < len;
}

template <int C, typename P>
__device__ __forceinline__ bool slotToChunk(const P& p, int64_t slot, int& n, int64_t& bos, int64_t& len,
                                            int64_t& chunk) {
  int64_t coff;
  return slotToChunk<C>(p, slot, n, bos, len, chunk, coff);
}

/// Starts asynchronous copies of a [N x N] fp32 block (global row stride row_stride, 16-byte
/// aligned rows) into shared memory with leading dimension ld (a multiple of 4). All `Threads`
/// threads of the CTA call; complete with asyncWaitAll() in each thread, then __syncthreads().
template <int Threads, int N>
__device__ __forceinline__ void asyncLoadSquare(float* dst, int ld, const float* src, int64_t row_stride) {
  constexpr int kVecPerRow = N / 4;
  for (int i = threadIdx.x; i < N * kVecPerRow; i += Threads) {
    const int r = i / kVecPerRow, c = (i - r * kVecPerRow) * 4;
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + r * ld + c));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src + r * row_stride + c)
                 : "memory");
  }
}

/// Waits for this thread's outstanding cp.async copies.
__device__ __forceinline__ void asyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/// Warp-wide inclusive cumsum of a chunk's log-decays: lane holds g of tokens lane and lane + 32;
/// returns b of those tokens and b_C (the chunk total). In double: with strong gates b reaches
/// -1000 within a chunk, where an fp32 b_t - b_s would carry ~3e-5 absolute (so relative, after
/// exp) error; differences are taken in double and only then rounded to fp32 for exp.
__device__ __forceinline__ void chunkCumsum(float g0, float g1, double& b0, double& b1,
                                            double& blast) {
  const int lane = threadIdx.x & 31;
  double x0 = g0, x1 = g1;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const double y0 = __shfl_up_sync(0xffffffffu, x0, off);
    const double y1 = __shfl_up_sync(0xffffffffu, x1, off);
    if (lane >= off) { x0 += y0; x1 += y1; }
  }
  const double tot0 = __shfl_sync(0xffffffffu, x0, 31);
  b0 = x0;
  b1 = x1 + tot0;
  blast = __shfl_sync(0xffffffffu, b1, 31);
}

/// exp with the hardware approximation (1xTF32 paths) or the precise libm one (3xTF32 / fp32).
template <bool Precise>
__device__ __forceinline__ float fastExp(float x) {
  return Precise ? expf(x) : __expf(x);
}

}  // namespace linac::kernels::cuda
