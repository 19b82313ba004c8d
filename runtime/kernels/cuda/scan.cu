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

void scanBackward(DType, const ScanShape&, const ScanBackwardArgs&, cudaStream_t) {
  throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +
                           ": scanBackward is not implemented on CUDA yet");
}

}  // namespace linac::kernels::cuda
