// SwiGLU's activation product y = silu(g) * u fused (fla's swiglu), forward and backward, over
// n elements of g, u [..., I] (the MLP's gate and up projections, any shape, contiguous).
//
// Per element, in fp32 (s = sigmoid(g)):
//   y  = g s u,
//   dg = dy u s (1 + g (1 - s))     (silu'(g) = s (1 + g (1 - s))),
//   du = dy g s.
// One read of g and u (and dy) and one write of y (of dg and du) per element: the composed ops
// write silu(g) and read it back in both passes, and round it to the input dtype in between.
//
// Elementwise: each thread takes kVectorBytes of every tensor per step (one access each) in a
// grid-stride loop; a tail shorter than a vector, or tensors not so aligned, go one element at a
// time.
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "pointwise.cuh"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace linac::kernels::cuda {
namespace {

using pointwise::Pack;
using pointwise::sigmoidF32;

constexpr int kThreads = 256;
constexpr int kVectorBytes = 16;
/// Blocks per SM the grid-stride loops are launched with.
constexpr int kBlocksPerSm = 8;

/// y [n] = silu(g) * u, V elements a thread step.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    swigluForwardKernel(const T* __restrict__ g, const T* __restrict__ u, T* __restrict__ y, int64_t n) {
  using P = Pack<T, V>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * V;
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    const P gp = *reinterpret_cast<const P*>(g + i), up = *reinterpret_cast<const P*>(u + i);
    P out;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float gv = tile::toF32(gp.v[v]);
      out.v[v] = tile::fromF32<T>(gv * sigmoidF32(gv) * tile::toF32(up.v[v]));
    }
    *reinterpret_cast<P*>(y + i) = out;
  }
}

/// dg, du [n] from dy [n], g, u; V elements a thread step.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    swigluBackwardKernel(const T* __restrict__ g, const T* __restrict__ u, const T* __restrict__ dy,
                         T* __restrict__ dg, T* __restrict__ du, int64_t n) {
  using P = Pack<T, V>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * V;
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    const P gp = *reinterpret_cast<const P*>(g + i), up = *reinterpret_cast<const P*>(u + i);
    const P dyp = *reinterpret_cast<const P*>(dy + i);
    P dgp, dup;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float gv = tile::toF32(gp.v[v]), uv = tile::toF32(up.v[v]), d = tile::toF32(dyp.v[v]);
      const float s = sigmoidF32(gv);
      dgp.v[v] = tile::fromF32<T>(d * uv * s * (1.0f + gv * (1.0f - s)));
      dup.v[v] = tile::fromF32<T>(d * gv * s);
    }
    *reinterpret_cast<P*>(dg + i) = dgp;
    *reinterpret_cast<P*>(du + i) = dup;
  }
}

/// Blocks for `items` thread steps.
unsigned gridFor(int64_t items) { return pointwise::gridBlocks((items + kThreads - 1) / kThreads, kBlocksPerSm); }

}  // namespace

void swigluForward(DType dtype, int64_t n, const SwigluForwardArgs& args, cudaStream_t stream) {
  LINAC_REQUIRE(n >= 0, "swigluForward: negative element count");
  if (n == 0) return;
  LINAC_REQUIRE(args.g && args.u && args.y, "swigluForward: null g, u or y");
  pointwise::withElementType(dtype, "swiglu", [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = kVectorBytes / sizeof(T);
    const auto* g = static_cast<const T*>(args.g);
    const auto* u = static_cast<const T*>(args.u);
    auto* y = static_cast<T*>(args.y);
    // The vectorized body, then the tail (and everything when the tensors are not aligned).
    const int64_t body = pointwise::aligned({g, u, y}, kVectorBytes) ? n / kVec * kVec : 0;
    if (body > 0) {
      swigluForwardKernel<T, kVec><<<gridFor(body / kVec), kThreads, 0, stream>>>(g, u, y, body);
      LINAC_CUDA_CHECK_LAUNCH("swigluForwardKernel");
    }
    if (n > body) {
      swigluForwardKernel<T, 1><<<gridFor(n - body), kThreads, 0, stream>>>(g + body, u + body, y + body, n - body);
      LINAC_CUDA_CHECK_LAUNCH("swigluForwardKernel");
    }
  });
}

void swigluBackward(DType dtype, int64_t n, const SwigluBackwardArgs& args, cudaStream_t stream) {
  LINAC_REQUIRE(n >= 0, "swigluBackward: negative element count");
  if (n == 0) return;
  LINAC_REQUIRE(args.g && args.u && args.dy && args.dg && args.du, "swigluBackward: null pointer");
  pointwise::withElementType(dtype, "swiglu", [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = kVectorBytes / sizeof(T);
    const auto* g = static_cast<const T*>(args.g);
    const auto* u = static_cast<const T*>(args.u);
    const auto* dy = static_cast<const T*>(args.dy);
    auto* dg = static_cast<T*>(args.dg);
    auto* du = static_cast<T*>(args.du);
    const int64_t body = pointwise::aligned({g, u, dy, dg, du}, kVectorBytes) ? n / kVec * kVec : 0;
    if (body > 0) {
      swigluBackwardKernel<T, kVec><<<gridFor(body / kVec), kThreads, 0, stream>>>(g, u, dy, dg, du, body);
      LINAC_CUDA_CHECK_LAUNCH("swigluBackwardKernel");
    }
    if (n > body) {
      swigluBackwardKernel<T, 1><<<gridFor(n - body), kThreads, 0, stream>>>(g + body, u + body, dy + body, dg + body,
                                                                            du + body, n - body);
      LINAC_CUDA_CHECK_LAUNCH("swigluBackwardKernel");
    }
  });
}

}  // namespace linac::kernels::cuda
