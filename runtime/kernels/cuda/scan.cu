// HGRN vector scan: h_t = exp(g_t) * h_{t-1} + x_t per channel (fp32 carry), forward and backward,
// as a chunked two-level scan over time so that N * D * (T / kChunk) threads work in parallel.
//
// Time is cut into chunks of kChunk tokens; one thread owns one (chunk, channel), consecutive
// threads take consecutive channels (coalesced), and keeps its chunk's kChunk tokens in registers
// (fully unrolled loops; tokens past the sequence end are loaded as x = dh = 0, g = 0, which the
// recurrences pass through unchanged). Over a chunk both recurrences are affine in their carry:
//   forward  h_end   = exp(G) * h_start + A,   A = chunk scan of x from h = 0,
//   reverse  acc_beg = exp(G) * acc_end + R,   R = reverse chunk scan of dh from acc = 0,
// with G the fp32 sum of g over the chunk. Forward (3 launches):
//   1 summaryKernel: per chunk, A and G -> workspace [slots, D].
//   2 carryKernel:   per (sequence, channel), walk the chunks: h_start of each chunk overwrites A;
//                    the final state is ht.
//   3 forwardKernel: per chunk, rescan from h_start, writing h.
// Backward (same shape): dh_acc starts at d_ht; for t = len-1..0: dh_acc += d_h_t; d_x_t = dh_acc;
// d_g_t = dh_acc * exp(g_t) * h_{t-1} (h_{-1} = h0 or 0); dh_acc *= exp(g_t); d_h0 = dh_acc.
//   1 summaryKernel: per chunk, A (only if d_g is wanted), G and R.
//   2 carryKernel:   forward carry (h_start over A), reverse carry seeded by d_ht (acc_end over R),
//                    d_h0 = the reverse carry's final value.
//   3 backwardKernel: per chunk, h_{t-1} recomputed forward from h_start in fp32 (registers; the
//                    dtype-rounded forward output is never read), then the reverse sweep from acc_end
//                    writing d_x and d_g.
// Chunk slots (chunk_slots.cuh): sequence n owns slots [coff_n, coff_n + ceil(len_n / kChunk)).
// Workspace (workspace.h, on the stream): fp32 [slots, D] arrays A, G (and R for the backward).
#include "chunk_slots.cuh"
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "tile.cuh"
#include "workspace.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

namespace linac::kernels::cuda {
namespace {

constexpr int kThreads = 128;      // channels per CTA
constexpr int kChunk = 32;         // tokens per chunk (per thread, in registers)
constexpr int kCarryUnroll = 8;    // chunks whose workspace loads are in flight in the carry pass
constexpr int kMaxGridY = 65535;

/// Sequence layout, in the form chunk_slots.cuh reads.
struct ScanParams {
  const int64_t* cu_seqlens;  // [N + 1] or null
  int64_t seq_len;
  int64_t chunks_per_seq;     // padded batch: ceil(T / kChunk)
  int num_seqs;
  int channels;
};

/// The chunk this thread's CTA covers: first token, token count (1..kChunk), slot; false when the
/// slot holds no chunk or the channel is past D.
__device__ __forceinline__ bool chunkOf(const ScanParams& p, int c, int64_t& start, int& count,
                                        int64_t& slot) {
  slot = blockIdx.x;
  int n;
  int64_t bos, len, chunk;
  if (c >= p.channels || !slotToChunk<kChunk>(p, slot, n, bos, len, chunk)) return false;
  start = bos + chunk * kChunk;
  count = int(min(int64_t(kChunk), len - chunk * kChunk));
  return true;
}

template <typename T>
__device__ __forceinline__ void loadChunk(const T* __restrict__ src, int64_t base, int64_t D,
                                          int count, float (&v)[kChunk]) {
#pragma unroll
  for (int i = 0; i < kChunk; ++i) v[i] = i < count ? tile::toF32<T>(src[base + i * D]) : 0.f;
}

/// Pass 1: per (chunk, channel) the chunk's zero-start forward state A (when x is non-null), its
/// total log-decay G and (when dh is non-null) the zero-start reverse accumulator R.
template <typename T>
__global__ void __launch_bounds__(kThreads) summaryKernel(
    ScanParams p,
    const T* __restrict__ x,      // [B, T, D] or null
    const float* __restrict__ g,  // [B, T, D]
    const T* __restrict__ dh,     // [B, T, D] or null
    float* __restrict__ ws_a,     // [slots, D]
    float* __restrict__ ws_g,     // [slots, D]
    float* __restrict__ ws_r) {   // [slots, D]
  const int c = blockIdx.y * kThreads + threadIdx.x;
  int64_t start, slot;
  int count;
  if (!chunkOf(p, c, start, count, slot)) return;
  const int64_t D = p.channels, base = start * D + c, w = slot * D + c;
  float gv[kChunk], xv[kChunk], dv[kChunk];  // every load issued before the first use
  loadChunk(g, base, D, count, gv);
  if (x) loadChunk(x, base, D, count, xv);
  if (dh) loadChunk(dh, base, D, count, dv);
  float gsum = 0.f;
#pragma unroll
  for (int i = 0; i < kChunk; ++i) gsum += gv[i];
  ws_g[w] = gsum;
  if (x) {
    float h = 0.f;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) h = expf(gv[i]) * h + xv[i];
    ws_a[w] = h;
  }
  if (dh) {
    float acc = 0.f;
#pragma unroll
    for (int i = kChunk - 1; i >= 0; --i) acc = (acc + dv[i]) * expf(gv[i]);
    ws_r[w] = acc;
  }
}

/// Walks sequence chunks [first, first + nch) of one channel (last to first when Reverse):
/// overwrites each chunk's summary s[slot] with the carry entering it and returns the final carry.
template <bool Reverse>
__device__ __forceinline__ float carryChunks(const float* __restrict__ ws_g, float* __restrict__ s,
                                             float carry, int64_t first, int64_t nch, int64_t D,
                                             int c) {
  for (int64_t k0 = 0; k0 < nch; k0 += kCarryUnroll) {
    float dec[kCarryUnroll], add[kCarryUnroll];
#pragma unroll
    for (int j = 0; j < kCarryUnroll; ++j) {  // loads first, so they are all in flight
      const int64_t k = Reverse ? nch - 1 - (k0 + j) : k0 + j, w = (first + k) * D + c;
      dec[j] = 1.f;  // past the last chunk: identity
      add[j] = 0.f;
      if (k0 + j < nch) {
        dec[j] = expf(ws_g[w]);
        add[j] = s[w];
      }
    }
#pragma unroll
    for (int j = 0; j < kCarryUnroll; ++j) {
      const int64_t k = Reverse ? nch - 1 - (k0 + j) : k0 + j;
      if (k0 + j < nch) s[(first + k) * D + c] = carry;
      carry = dec[j] * carry + add[j];
    }
  }
  return carry;
}

/// Pass 2: one thread per (sequence, channel). Forward carry over ws_a (when non-null) from h0,
/// writing ht; reverse carry over ws_r (when non-null) from d_ht, writing d_h0.
__global__ void __launch_bounds__(kThreads) carryKernel(
    ScanParams p,
    const float* __restrict__ ws_g,  // [slots, D]
    float* __restrict__ ws_a,        // [slots, D] or null
    float* __restrict__ ws_r,        // [slots, D] or null
    const float* __restrict__ h0,    // [N, D] or null
    float* __restrict__ ht,          // [N, D] or null
    const float* __restrict__ dht,   // [N, D] or null
    float* __restrict__ dh0) {       // [N, D] or null
  const int c = blockIdx.x * kThreads + threadIdx.x;
  const int n = blockIdx.y;
  if (c >= p.channels) return;
  int64_t bos, len, coff;
  seqInfo<kChunk>(p, n, bos, len, coff);
  const int64_t D = p.channels, nch = (len + kChunk - 1) / kChunk, sd = int64_t(n) * D + c;
  if (ws_a) {
    const float h = carryChunks<false>(ws_g, ws_a, h0 ? h0[sd] : 0.f, coff, nch, D, c);
    if (ht) ht[sd] = h;
  }
  if (ws_r) {
    const float acc = carryChunks<true>(ws_g, ws_r, dht ? dht[sd] : 0.f, coff, nch, D, c);
    if (dh0) dh0[sd] = acc;
  }
}

/// Forward pass 3: rescan each chunk from its incoming state, writing h.
template <typename T>
__global__ void __launch_bounds__(kThreads) forwardKernel(
    ScanParams p,
    const T* __restrict__ x,          // [B, T, D]
    const float* __restrict__ g,      // [B, T, D]
    const float* __restrict__ ws_a,   // [slots, D] incoming state
    T* __restrict__ hout) {           // [B, T, D]
  const int c = blockIdx.y * kThreads + threadIdx.x;
  int64_t start, slot;
  int count;
  if (!chunkOf(p, c, start, count, slot)) return;
  const int64_t D = p.channels, base = start * D + c;
  float xv[kChunk], gv[kChunk];
  loadChunk(x, base, D, count, xv);
  loadChunk(g, base, D, count, gv);
  float h = ws_a[slot * D + c];
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    h = expf(gv[i]) * h + xv[i];
    if (i < count) hout[base + i * D] = tile::fromF32<T>(h);
  }
}

/// Backward pass 3: h_{t-1} forward from the chunk's incoming state (when d_g is wanted), then the
/// reverse sweep from the accumulator entering the chunk's end, writing d_x and d_g.
template <typename T>
__global__ void __launch_bounds__(kThreads) backwardKernel(
    ScanParams p,
    const T* __restrict__ x,          // [B, T, D]
    const float* __restrict__ g,      // [B, T, D]
    const T* __restrict__ dh,         // [B, T, D]
    const float* __restrict__ ws_a,   // [slots, D] incoming state, or null (no d_g)
    const float* __restrict__ ws_r,   // [slots, D] accumulator entering the chunk's end
    T* __restrict__ dx,               // [B, T, D] or null
    float* __restrict__ dg) {         // [B, T, D] or null
  const int c = blockIdx.y * kThreads + threadIdx.x;
  int64_t start, slot;
  int count;
  if (!chunkOf(p, c, start, count, slot)) return;
  const int64_t D = p.channels, base = start * D + c, w = slot * D + c;
  float lam[kChunk], dv[kChunk], xv[kChunk], hprev[kChunk];  // every load issued before first use
  loadChunk(g, base, D, count, lam);
  loadChunk(dh, base, D, count, dv);
  if (dg) loadChunk(x, base, D, count, xv);
#pragma unroll
  for (int i = 0; i < kChunk; ++i) lam[i] = expf(lam[i]);
  if (dg) {
    float h = ws_a[w];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      hprev[i] = h;
      h = lam[i] * h + xv[i];
    }
  }
  float acc = ws_r[w];
#pragma unroll
  for (int i = kChunk - 1; i >= 0; --i) {
    acc += dv[i];
    if (i < count) {
      if (dx) dx[base + i * D] = tile::fromF32<T>(acc);
      if (dg) dg[base + i * D] = acc * lam[i] * hprev[i];
    }
    acc *= lam[i];
  }
}

/// Sequence count, chunk-slot count and layout; validates the shape.
ScanParams scanParams(const ScanShape& s, const char* who, int64_t& slots) {
  int64_t num_seqs = s.batch;
  if (s.cu_seqlens) {
    LINAC_REQUIRE(s.batch == 1 && s.num_seqs > 0,
                  std::string(who) + ": cu_seqlens needs batch == 1 and num_seqs > 0");
    num_seqs = s.num_seqs;
  }
  LINAC_REQUIRE(num_seqs <= kMaxGridY, std::string(who) + ": too many sequences for one grid");
  LINAC_REQUIRE((s.channels + kThreads - 1) / kThreads <= kMaxGridY,
                std::string(who) + ": too many channels for one grid");
  ScanParams p{};
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.chunks_per_seq = (s.seq_len + kChunk - 1) / kChunk;
  p.num_seqs = int(num_seqs);
  p.channels = int(s.channels);
  // Varlen: the last slot is at most ceil(total / kChunk) + N - 2 (chunk_slots.cuh).
  slots = s.cu_seqlens ? s.seq_len / kChunk + num_seqs + 1 : num_seqs * p.chunks_per_seq;
  if (p.chunks_per_seq == 0) p.chunks_per_seq = 1;  // slotToChunk divides by it
  LINAC_REQUIRE(slots <= INT32_MAX, std::string(who) + ": too many chunks for one grid");
  return p;
}

/// [slots, D] fp32 workspace arrays, carved from one workspace (workspace.h).
class ScanWorkspace {
 public:
  ScanWorkspace(int64_t slots, int64_t D, int arrays, cudaStream_t stream)
      : array_bytes_((size_t(slots) * size_t(D) * sizeof(float) + 255) / 256 * 256),
        memory_(array_bytes_ * arrays, stream) {}
  float* array(int i) const { return reinterpret_cast<float*>(memory_.data() + array_bytes_ * i); }

 private:
  size_t array_bytes_;
  Workspace memory_;
};

template <typename T>
void launchScan(const ScanShape& s, const ScanForwardArgs& a, cudaStream_t stream) {
  int64_t slots;
  const ScanParams p = scanParams(s, "scanForward", slots);
  if (p.num_seqs == 0 || p.channels == 0) return;
  const unsigned cblocks = unsigned((p.channels + kThreads - 1) / kThreads);
  const auto* x = static_cast<const T*>(a.x);
  if (slots == 0) {  // padded batch with T = 0: ht = h0
    if (a.ht) {
      const size_t bytes = size_t(p.num_seqs) * p.channels * sizeof(float);
      if (a.h0) LINAC_CUDA_CHECK(cudaMemcpyAsync(a.ht, a.h0, bytes, cudaMemcpyDeviceToDevice, stream));
      else LINAC_CUDA_CHECK(cudaMemsetAsync(a.ht, 0, bytes, stream));
    }
    return;
  }
  const ScanWorkspace ws(slots, p.channels, 2, stream);
  float *ws_a = ws.array(0), *ws_g = ws.array(1);
  const dim3 chunk_grid(unsigned(slots), cblocks);
  summaryKernel<T><<<chunk_grid, kThreads, 0, stream>>>(p, x, a.g, nullptr, ws_a, ws_g, nullptr);
  LINAC_CUDA_CHECK_LAUNCH("summaryKernel");
  carryKernel<<<dim3(cblocks, unsigned(p.num_seqs)), kThreads, 0, stream>>>(
      p, ws_g, ws_a, nullptr, a.h0, a.ht, nullptr, nullptr);
  LINAC_CUDA_CHECK_LAUNCH("carryKernel");
  forwardKernel<T><<<chunk_grid, kThreads, 0, stream>>>(p, x, a.g, ws_a, static_cast<T*>(a.h));
  LINAC_CUDA_CHECK_LAUNCH("forwardKernel");
}

template <typename T>
void launchScanBackward(const ScanShape& s, const ScanBackwardArgs& a, cudaStream_t stream) {
  int64_t slots;
  const ScanParams p = scanParams(s, "scanBackward", slots);
  if (p.num_seqs == 0 || p.channels == 0 || !(a.d_x || a.d_g || a.d_h0)) return;
  const unsigned cblocks = unsigned((p.channels + kThreads - 1) / kThreads);
  const auto* x = static_cast<const T*>(a.fwd.x);
  const auto* dh = static_cast<const T*>(a.d_h);
  if (slots == 0) {  // padded batch with T = 0: d_h0 = d_ht
    if (a.d_h0) {
      const size_t bytes = size_t(p.num_seqs) * p.channels * sizeof(float);
      if (a.d_ht) LINAC_CUDA_CHECK(cudaMemcpyAsync(a.d_h0, a.d_ht, bytes, cudaMemcpyDeviceToDevice, stream));
      else LINAC_CUDA_CHECK(cudaMemsetAsync(a.d_h0, 0, bytes, stream));
    }
    return;
  }
  const ScanWorkspace ws(slots, p.channels, 3, stream);
  float *ws_a = a.d_g ? ws.array(0) : nullptr, *ws_g = ws.array(1), *ws_r = ws.array(2);
  const dim3 chunk_grid(unsigned(slots), cblocks);
  summaryKernel<T><<<chunk_grid, kThreads, 0, stream>>>(p, a.d_g ? x : nullptr, a.fwd.g, dh, ws_a,
                                                       ws_g, ws_r);
  LINAC_CUDA_CHECK_LAUNCH("summaryKernel");
  carryKernel<<<dim3(cblocks, unsigned(p.num_seqs)), kThreads, 0, stream>>>(
      p, ws_g, ws_a, ws_r, a.fwd.h0, nullptr, a.d_ht, a.d_h0);
  LINAC_CUDA_CHECK_LAUNCH("carryKernel");
  if (a.d_x || a.d_g) {
    backwardKernel<T><<<chunk_grid, kThreads, 0, stream>>>(p, x, a.fwd.g, dh, ws_a, ws_r,
                                                          static_cast<T*>(a.d_x), a.d_g);
    LINAC_CUDA_CHECK_LAUNCH("backwardKernel");
  }
}

}  // namespace

void scanForward(DType dtype, const ScanShape& shape, const ScanForwardArgs& args,
                 cudaStream_t stream) {
  LINAC_REQUIRE(args.x && args.g && args.h, "scanForward: x, g, h are required");
  switch (dtype) {
    case DType::F32: launchScan<float>(shape, args, stream); break;
    case DType::BF16: launchScan<__nv_bfloat16>(shape, args, stream); break;
    case DType::F16: launchScan<__half>(shape, args, stream); break;
  }
}

void scanBackward(DType dtype, const ScanShape& shape, const ScanBackwardArgs& args,
                  cudaStream_t stream) {
  LINAC_REQUIRE(args.fwd.x && args.fwd.g && args.d_h, "scanBackward: x, g, d_h are required");
  switch (dtype) {
    case DType::F32: launchScanBackward<float>(shape, args, stream); break;
    case DType::BF16: launchScanBackward<__nv_bfloat16>(shape, args, stream); break;
    case DType::F16: launchScanBackward<__half>(shape, args, stream); break;
  }
}

}  // namespace linac::kernels::cuda
