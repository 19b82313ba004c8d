// L2 normalisation over the last dimension (fla's l2norm), forward and backward, over rows
// x [n, D] (q or k [B, T, H, dk] as n = B * T * H rows; contiguous).
//
// Per row, in fp32 (s = sum_j x_j^2, r = 1 / sqrt(s + eps)):
//   y_i  = x_i r,
//   dx_i = r dy_i - x_i r^3 sum_j x_j dy_j = r (dy_i - x_i r^2 (x . dy))   (dr/dx_i = -x_i r^3).
// The forward writes r per row (fp32) beside y; the backward reads x, dy and r once. The composed
// torch ops write x^2, the sum, the root and the quotient as separate tensors in both passes
// (about ten full-size passes for the backward alone).
//
// One warp per row, rows in a grid-stride loop. A lane reads V elements per access (kVectorBytes)
// when D is a multiple of V and the tensors are so aligned, one element otherwise; the row's sum
// is a warp shuffle reduce, and the second pass reads the row again (a few hundred bytes, still
// in L1).
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
using pointwise::warpSum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVectorBytes = 16;
/// Blocks per SM the grid-stride loops are launched with.
constexpr int kBlocksPerSm = 8;

/// y [n, D] = x / sqrt(sum x^2 + eps) per row, r [n] = the row's 1 / sqrt(sum x^2 + eps).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    l2NormForwardKernel(const T* __restrict__ x, T* __restrict__ y, float* __restrict__ r, int64_t rows,
                        int D, float eps) {
  using P = Pack<T, V>;
  const int lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += int64_t(gridDim.x) * kWarps) {
    const T* xr = x + row * D;
    float sum = 0.0f;
    for (int j = lane * V; j < D; j += 32 * V) {
      const P p = *reinterpret_cast<const P*>(xr + j);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float e = tile::toF32(p.v[v]);
        sum += e * e;
      }
    }
    const float rr = rsqrtf(warpSum(sum) + eps);
    T* yr = y + row * D;
    for (int j = lane * V; j < D; j += 32 * V) {
      const P p = *reinterpret_cast<const P*>(xr + j);
      P out;
#pragma unroll
      for (int v = 0; v < V; ++v) out.v[v] = tile::fromF32<T>(tile::toF32(p.v[v]) * rr);
      *reinterpret_cast<P*>(yr + j) = out;
    }
    if (lane == 0) r[row] = rr;
  }
}

/// dx [n, D] from dy [n, D], x and the forward's r (above).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    l2NormBackwardKernel(const T* __restrict__ x, const T* __restrict__ dy, const float* __restrict__ r,
                         T* __restrict__ dx, int64_t rows, int D) {
  using P = Pack<T, V>;
  const int lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += int64_t(gridDim.x) * kWarps) {
    const T* xr = x + row * D;
    const T* dyr = dy + row * D;
    float dot = 0.0f;
    for (int j = lane * V; j < D; j += 32 * V) {
      const P xp = *reinterpret_cast<const P*>(xr + j), dp = *reinterpret_cast<const P*>(dyr + j);
#pragma unroll
      for (int v = 0; v < V; ++v) dot += tile::toF32(xp.v[v]) * tile::toF32(dp.v[v]);
    }
    const float rr = r[row];
    const float c = rr * rr * warpSum(dot);  // r^2 (x . dy)
    T* dxr = dx + row * D;
    for (int j = lane * V; j < D; j += 32 * V) {
      const P xp = *reinterpret_cast<const P*>(xr + j), dp = *reinterpret_cast<const P*>(dyr + j);
      P out;
#pragma unroll
      for (int v = 0; v < V; ++v)
        out.v[v] = tile::fromF32<T>(rr * (tile::toF32(dp.v[v]) - tile::toF32(xp.v[v]) * c));
      *reinterpret_cast<P*>(dxr + j) = out;
    }
  }
}

/// Blocks for `rows` rows (a warp each).
unsigned gridFor(int64_t rows) { return pointwise::gridBlocks((rows + kWarps - 1) / kWarps, kBlocksPerSm); }

}  // namespace

void l2NormForward(DType dtype, const L2NormShape& shape, const L2NormForwardArgs& args, cudaStream_t stream) {
  LINAC_REQUIRE(shape.rows >= 0 && shape.dim > 0, "l2NormForward: rows must be >= 0 and dim > 0");
  LINAC_REQUIRE(shape.eps > 0.0f, "l2NormForward: eps must be positive");
  if (shape.rows == 0) return;
  LINAC_REQUIRE(args.x && args.y && args.r, "l2NormForward: null x, y or r");
  pointwise::withElementType(dtype, "l2Norm", [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = kVectorBytes / sizeof(T);
    const auto* x = static_cast<const T*>(args.x);
    auto* y = static_cast<T*>(args.y);
    const unsigned grid = gridFor(shape.rows);
    if (shape.dim % kVec == 0 && pointwise::aligned({x, y}, kVectorBytes))
      l2NormForwardKernel<T, kVec><<<grid, kThreads, 0, stream>>>(x, y, args.r, shape.rows, shape.dim, shape.eps);
    else
      l2NormForwardKernel<T, 1><<<grid, kThreads, 0, stream>>>(x, y, args.r, shape.rows, shape.dim, shape.eps);
    LINAC_CUDA_CHECK_LAUNCH("l2NormForwardKernel");
  });
}

void l2NormBackward(DType dtype, const L2NormShape& shape, const L2NormBackwardArgs& args, cudaStream_t stream) {
  LINAC_REQUIRE(shape.rows >= 0 && shape.dim > 0, "l2NormBackward: rows must be >= 0 and dim > 0");
  if (shape.rows == 0) return;
  LINAC_REQUIRE(args.x && args.dy && args.r && args.dx, "l2NormBackward: null x, dy, r or dx");
  pointwise::withElementType(dtype, "l2Norm", [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = kVectorBytes / sizeof(T);
    const auto* x = static_cast<const T*>(args.x);
    const auto* dy = static_cast<const T*>(args.dy);
    auto* dx = static_cast<T*>(args.dx);
    const unsigned grid = gridFor(shape.rows);
    if (shape.dim % kVec == 0 && pointwise::aligned({x, dy, dx}, kVectorBytes))
      l2NormBackwardKernel<T, kVec><<<grid, kThreads, 0, stream>>>(x, dy, args.r, dx, shape.rows, shape.dim);
    else
      l2NormBackwardKernel<T, 1><<<grid, kThreads, 0, stream>>>(x, dy, args.r, dx, shape.rows, shape.dim);
    LINAC_CUDA_CHECK_LAUNCH("l2NormBackwardKernel");
  });
}

}  // namespace linac::kernels::cuda
