// HGRN vector scan forward: h_t = exp(g_t) * h_{t-1} + x_t per channel, fp32 carry.
// One thread per (sequence, channel); consecutive threads take consecutive channels (coalesced);
// the time loop is unrolled so several tokens' loads are in flight. A chunked two-level scan would
// add parallelism for small B * D; B * D >= ~16K channels already fills the chip.
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

namespace linac::kernels::cuda {
namespace {

constexpr int kScanThreads = 128;

template <typename T>
__global__ void __launch_bounds__(kScanThreads) scanForwardKernel(
    const T* __restrict__ x,        // [B, T, D]
    const float* __restrict__ g,    // [B, T, D]
    const float* __restrict__ h0,   // [N, D] or null
    T* __restrict__ hout,           // [B, T, D]
    float* __restrict__ ht,         // [N, D] or null
    const int64_t* __restrict__ cu_seqlens, int64_t seq_len, int D) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int n = blockIdx.y;
  if (c >= D) return;
  int64_t bos, len;
  if (cu_seqlens) {
    bos = cu_seqlens[n];
    len = cu_seqlens[n + 1] - bos;
  } else {
    bos = int64_t(n) * seq_len;
    len = seq_len;
  }
  float hc = h0 ? h0[int64_t(n) * D + c] : 0.f;
  int64_t t = 0;
  constexpr int U = 8;
  for (; t + U <= len; t += U) {
    float xv[U], gv[U];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int64_t idx = (bos + t + i) * D + c;
      xv[i] = tile::toF32<T>(x[idx]);
      gv[i] = g[idx];
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
      hc = expf(gv[i]) * hc + xv[i];
      hout[(bos + t + i) * D + c] = tile::fromF32<T>(hc);
    }
  }
  for (; t < len; ++t) {
    const int64_t idx = (bos + t) * D + c;
    hc = expf(g[idx]) * hc + tile::toF32<T>(x[idx]);
    hout[idx] = tile::fromF32<T>(hc);
  }
  if (ht) ht[int64_t(n) * D + c] = hc;
}

template <typename T>
void launchScan(const ScanShape& s, const ScanForwardArgs& a, int num_seqs, cudaStream_t stream) {
  const dim3 grid(unsigned((s.channels + kScanThreads - 1) / kScanThreads), unsigned(num_seqs));
  scanForwardKernel<T><<<grid, kScanThreads, 0, stream>>>(
      static_cast<const T*>(a.x), a.g, a.h0, static_cast<T*>(a.h), a.ht, s.cu_seqlens, s.seq_len,
      int(s.channels));
  LINAC_CUDA_CHECK_LAUNCH("scanForwardKernel");
}

// Backward: dh_acc = d_ht; for t = len-1..0: dh_acc += d_h_t; d_x_t = dh_acc;
// d_g_t = dh_acc * exp(g_t) * h_{t-1}; dh_acc *= exp(g_t); d_h0 = dh_acc. h_{t-1} is recomputed by
// a forward sweep that parks it (fp32) in d_g, which the same thread then overwrites in reverse.
template <typename T>
__global__ void __launch_bounds__(kScanThreads) scanBackwardKernel(
    const T* __restrict__ x, const float* __restrict__ g, const float* __restrict__ h0,
    const T* __restrict__ dh, const float* __restrict__ dht, T* __restrict__ dx,
    float* __restrict__ dg, float* __restrict__ dh0, const int64_t* __restrict__ cu_seqlens,
    int64_t seq_len, int D) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int n = blockIdx.y;
  if (c >= D) return;
  int64_t bos, len;
  if (cu_seqlens) {
    bos = cu_seqlens[n];
    len = cu_seqlens[n + 1] - bos;
  } else {
    bos = int64_t(n) * seq_len;
    len = seq_len;
  }
  if (dg) {  // forward sweep: dg[t] <- h_{t-1}
    float hc = h0 ? h0[int64_t(n) * D + c] : 0.f;
    for (int64_t t = 0; t < len; ++t) {
      const int64_t idx = (bos + t) * D + c;
      dg[idx] = hc;
      hc = expf(g[idx]) * hc + tile::toF32<T>(x[idx]);
    }
  }
  float acc = dht ? dht[int64_t(n) * D + c] : 0.f;
  for (int64_t t = len - 1; t >= 0; --t) {
    const int64_t idx = (bos + t) * D + c;
    acc += tile::toF32<T>(dh[idx]);
    if (dx) dx[idx] = tile::fromF32<T>(acc);
    const float lam = expf(g[idx]);
    if (dg) dg[idx] = acc * lam * dg[idx];
    acc *= lam;
  }
  if (dh0) dh0[int64_t(n) * D + c] = acc;
}

template <typename T>
void launchScanBackward(const ScanShape& s, const ScanBackwardArgs& a, int num_seqs,
                        cudaStream_t stream) {
  const dim3 grid(unsigned((s.channels + kScanThreads - 1) / kScanThreads), unsigned(num_seqs));
  scanBackwardKernel<T><<<grid, kScanThreads, 0, stream>>>(
      static_cast<const T*>(a.fwd.x), a.fwd.g, a.fwd.h0, static_cast<const T*>(a.d_h), a.d_ht,
      static_cast<T*>(a.d_x), a.d_g, a.d_h0, s.cu_seqlens, s.seq_len, int(s.channels));
  LINAC_CUDA_CHECK_LAUNCH("scanBackwardKernel");
}

}  // namespace

void scanForward(DType dtype, const ScanShape& shape, const ScanForwardArgs& args,
                 cudaStream_t stream) {
  LINAC_REQUIRE(args.x && args.g && args.h, "scanForward: x, g, h are required");
  int64_t num_seqs = shape.batch;
  if (shape.cu_seqlens) {
    LINAC_REQUIRE(shape.batch == 1 && shape.num_seqs > 0,
                  "scanForward: cu_seqlens needs batch == 1 and num_seqs > 0");
    num_seqs = shape.num_seqs;
  }
  LINAC_REQUIRE(num_seqs <= 65535, "scanForward: too many sequences for one grid");
  if (num_seqs == 0 || shape.channels == 0) return;
  switch (dtype) {
    case DType::F32: launchScan<float>(shape, args, int(num_seqs), stream); break;
    case DType::BF16: launchScan<__nv_bfloat16>(shape, args, int(num_seqs), stream); break;
    case DType::F16: launchScan<__half>(shape, args, int(num_seqs), stream); break;
  }
}

void scanBackward(DType dtype, const ScanShape& shape, const ScanBackwardArgs& args,
                  cudaStream_t stream) {
  LINAC_REQUIRE(args.fwd.x && args.fwd.g && args.d_h, "scanBackward: x, g, d_h are required");
  int64_t num_seqs = shape.batch;
  if (shape.cu_seqlens) {
    LINAC_REQUIRE(shape.batch == 1 && shape.num_seqs > 0,
                  "scanBackward: cu_seqlens needs batch == 1 and num_seqs > 0");
    num_seqs = shape.num_seqs;
  }
  LINAC_REQUIRE(num_seqs <= 65535, "scanBackward: too many sequences for one grid");
  if (num_seqs == 0 || shape.channels == 0) return;
  switch (dtype) {
    case DType::F32: launchScanBackward<float>(shape, args, int(num_seqs), stream); break;
    case DType::BF16: launchScanBackward<__nv_bfloat16>(shape, args, int(num_seqs), stream); break;
    case DType::F16: launchScanBackward<__half>(shape, args, int(num_seqs), stream); break;
  }
}

}  // namespace linac::kernels::cuda
