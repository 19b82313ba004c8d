// Cross-entropy over the rows of a chunk of logits, and the gradient of the mean loss with
// respect to them, in one kernel (the LM head's chunked linear + cross-entropy,
// runtime/ops/linear_cross_entropy.cpp): rows [c, V] in the GEMM's dtype.
//
// Per row (fp32; t = its target; rows whose target is the ignore index count for nothing):
//   m = max_j l_j,  s = sum_j exp(l_j - m),  lse = m + log s,
//   loss = lse - l_t,
//   grad_j = (exp(l_j - lse) - [j == t]) * scale      (scale = 1 / the chunk's scored tokens of
//                                                        the whole batch, read from device memory).
// The composed ATen ops make about eight passes over the [c, V] logits (the fp32 copy, max, the
// shifted exponentials, their sum, the division, the target's -1, the scale, the copy back to the
// GEMM's dtype); this reads a row twice (the second time from L2) and writes its gradient once, in
// place over the logits when the caller asks.
//
// A target outside [0, V) (and not the ignore index) makes the row's loss NaN.
//
// One block per row: its threads take 16 bytes per access when V is a multiple of that many
// elements and the rows are so aligned, one element otherwise; (max, sum) pairs are combined online within a
// thread, then across the warp and the block.
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "pointwise.cuh"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>

namespace linac::kernels::cuda {
namespace {

using pointwise::Pack;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVectorBytes = 16;

/// The running (max, sum of exp(x - max)) of a set, with one more set merged in.
struct MaxSum {
  float m = -FLT_MAX;
  float s = 0.0f;
  __device__ void add(float x) {
    if (x > m) {
      s = s * expf(m - x) + 1.0f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  __device__ void merge(float m2, float s2) {
    const float mx = fmaxf(m, m2);
    s = (s == 0.0f ? 0.0f : s * expf(m - mx)) + (s2 == 0.0f ? 0.0f : s2 * expf(m2 - mx));
    m = mx;
  }
};

/// The block's (max, sum) over its threads' partial pairs.
__device__ MaxSum blockMaxSum(MaxSum part) {
  __shared__ float ms[kWarps], ss[kWarps];
  for (int offset = 16; offset > 0; offset >>= 1)
    part.merge(__shfl_xor_sync(0xffffffffu, part.m, offset), __shfl_xor_sync(0xffffffffu, part.s, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) ms[warp] = part.m, ss[warp] = part.s;
  __syncthreads();
  MaxSum all;
  for (int w = 0; w < kWarps; ++w) all.merge(ms[w], ss[w]);
  return all;
}

/// loss [c] and (when grad is non-null) grad [c, V] from logits [c, V]; grad may be logits.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    crossEntropyKernel(const T* logits, const int64_t* __restrict__ targets, int64_t ignoreIndex,
                       const float* __restrict__ scale, float* __restrict__ loss, T* grad, int64_t vocab) {
  using P = Pack<T, V>;
  const int64_t row = blockIdx.x;
  const T* lr = logits + row * vocab;
  const int64_t target = targets[row];
  const bool scored = target != ignoreIndex;
  const bool inRange = target >= 0 && target < vocab;
  // the target's logit, read before any thread overwrites the row (grad may alias logits)
  const float picked = threadIdx.x == 0 && scored && inRange ? tile::toF32(lr[target]) : 0.0f;
  MaxSum part;
  for (int64_t j = int64_t(threadIdx.x) * V; j < vocab; j += int64_t(kThreads) * V) {
    const P p = *reinterpret_cast<const P*>(lr + j);
#pragma unroll
    for (int v = 0; v < V; ++v) part.add(tile::toF32(p.v[v]));
  }
  const MaxSum all = blockMaxSum(part);
  const float lse = all.m + logf(all.s);
  // a target outside [0, V) gives a NaN loss (visible in the mean), never a read past the row
  if (threadIdx.x == 0) loss[row] = !scored ? 0.0f : inRange ? lse - picked : __int_as_float(0x7fc00000);
  if (grad == nullptr) return;
  const float k = scored ? *scale : 0.0f;
  T* gr = grad + row * vocab;
  for (int64_t j = int64_t(threadIdx.x) * V; j < vocab; j += int64_t(kThreads) * V) {
    const P p = *reinterpret_cast<const P*>(lr + j);
    P out;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float softmax = expf(tile::toF32(p.v[v]) - lse);
      out.v[v] = tile::fromF32<T>((softmax - (j + v == target ? 1.0f : 0.0f)) * k);
    }
    *reinterpret_cast<P*>(gr + j) = out;
  }
}

}  // namespace

void crossEntropyForwardBackward(DType dtype, const CrossEntropyShape& shape, const CrossEntropyArgs& args,
                                 cudaStream_t stream) {
  LINAC_REQUIRE(shape.rows >= 0 && shape.vocab > 0, "crossEntropy: rows must be >= 0 and vocab > 0");
  LINAC_REQUIRE(shape.rows <= 0x7fffffff, "crossEntropy: rows past the launch grid's limit");
  if (shape.rows == 0) return;
  LINAC_REQUIRE(args.logits && args.targets && args.scale && args.loss, "crossEntropy: null logits, targets, scale or loss");
  pointwise::withElementType(dtype, "crossEntropy", [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = kVectorBytes / int(sizeof(T));
    const auto* logits = static_cast<const T*>(args.logits);
    auto* grad = static_cast<T*>(args.grad);
    const bool vector = shape.vocab % kVec == 0 && pointwise::aligned({logits, grad}, kVectorBytes);
    const unsigned grid = static_cast<unsigned>(shape.rows);
    if (vector)
      crossEntropyKernel<T, kVec><<<grid, kThreads, 0, stream>>>(logits, args.targets, args.ignoreIndex, args.scale,
                                                                 args.loss, grad, shape.vocab);
    else
      crossEntropyKernel<T, 1><<<grid, kThreads, 0, stream>>>(logits, args.targets, args.ignoreIndex, args.scale,
                                                              args.loss, grad, shape.vocab);
    LINAC_CUDA_CHECK_LAUNCH("crossEntropyKernel");
  });
}

}  // namespace linac::kernels::cuda
