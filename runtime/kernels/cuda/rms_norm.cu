// RMSNorm over the last dimension, optionally after a residual add (fla's fused add + RMSNorm),
// forward and backward, over rows [n, D] (the residual stream [B, T, hidden] as n = B * T rows;
// contiguous).
//
// Per row, in fp32 (h = x, or h = round_X(x + r) with a residual r, exactly as the composed
// `x + r` in x's dtype would give; s = rstd; a = the gate, 1 without one):
//   s   = 1 / sqrt(mean_j h_j^2 + eps),        y_i = h_i s w_i a_i   (written in Y, h in X),
//   g_i = dy_i a_i w_i,
//   dh_i = s (g_i - h_i s^2 mean_j(g_j h_j)) + dh_out_i   (dh_out: h's gradient from its other
//          use, the next residual add), written as dx (X) and, with a residual, as dr (R),
//   da_i = dy_i h_i s w_i                                 (with a gate, in Y),
//   dw_i = sum over rows of dy_i a_i h_i s.
// The gate is fla's FusedRMSNormGated without its activation: a linear layer's output norm times
// its gate role (whose map, generated from the spec, applied the activation).
// One read of x (and r) and one write of y (and h) per element forward; one read of dy, h (and
// dh_out) and one write of dx (and dr) backward, where the composed ops (ATen's rms_norm, the add,
// autocast's cast of y) make 3-4 passes each way. dw is a second, column-parallel pass: each
// thread owns a column and sums a slice of rows, and the slices' partial sums are added in a fixed
// order (deterministic).
//
// Rows: one warp each in a grid-stride loop, a lane taking kVector elements per access when D is a
// multiple of it and every tensor is so aligned, one element otherwise; a row's sums are warp
// shuffle reduces, and its second pass re-reads the row (a few KB, still in L1).
//
// Element types (X: x and h; R: the residual; Y: y and dy): (fp32, fp32, fp32), the mixed
// training case (fp32, bf16, bf16) and (fp32, fp16, fp16), and the all-16-bit ones (bf16, bf16,
// bf16) and (fp16, fp16, fp16). rmsNormSupported tells the caller.
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "pointwise.cuh"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

namespace linac::kernels::cuda {
namespace {

using pointwise::Pack;
using pointwise::warpSum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVector = 4;
/// Blocks per SM the row loops are launched with.
constexpr int kBlocksPerSm = 8;
/// Rows summed by one thread of the dw pass before its partial goes to the workspace.
constexpr int64_t kDwRowsPerSlice = 256;

template <typename T, int V>
__device__ __forceinline__ void loadF32(const T* p, float (&out)[V]) {
  const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = tile::toF32(pack.v[v]);
}

template <typename T, int V>
__device__ __forceinline__ void storeF32(T* p, const float (&in)[V]) {
  Pack<T, V> pack;
#pragma unroll
  for (int v = 0; v < V; ++v) pack.v[v] = tile::fromF32<T>(in[v]);
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

/// h's V elements at column j of a row: x, or x + r rounded to X (as the composed add would be).
template <typename X, typename R, int V>
__device__ __forceinline__ void rowInput(const X* xr, const R* rr, int j, float (&h)[V]) {
  loadF32<X, V>(xr + j, h);
  if (rr == nullptr) return;
  float r[V];
  loadF32<R, V>(rr + j, r);
#pragma unroll
  for (int v = 0; v < V; ++v) h[v] = tile::toF32(tile::fromF32<X>(h[v] + r[v]));
}

/// y = h s w per row, h = x (+ r), s = rstd; h written when r is given.
template <typename X, typename R, typename Y, int V>
__global__ void __launch_bounds__(kThreads)
    rmsNormForwardKernel(const X* __restrict__ x, const R* __restrict__ r, const float* __restrict__ w,
                         const Y* __restrict__ gate, Y* __restrict__ y, X* __restrict__ h,
                         float* __restrict__ rstd, int64_t rows, int D, float eps) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t base = row * D;
    const R* rr = r ? r + base : nullptr;
    float sum = 0.0f;
    for (int j = lane * V; j < D; j += 32 * V) {
      float hv[V];
      rowInput<X, R, V>(x + base, rr, j, hv);
#pragma unroll
      for (int v = 0; v < V; ++v) sum += hv[v] * hv[v];
      if (h) storeF32<X, V>(h + base + j, hv);
    }
    const float s = rsqrtf(warpSum(sum) / float(D) + eps);
    for (int j = lane * V; j < D; j += 32 * V) {
      float hv[V], wv[V];
      rowInput<X, R, V>(x + base, rr, j, hv);
      loadF32<float, V>(w + j, wv);
#pragma unroll
      for (int v = 0; v < V; ++v) hv[v] *= s * wv[v];
      if (gate) {
        float av[V];
        loadF32<Y, V>(gate + base + j, av);
#pragma unroll
        for (int v = 0; v < V; ++v) hv[v] *= av[v];
      }
      storeF32<Y, V>(y + base + j, hv);
    }
    if (lane == 0) rstd[row] = s;
  }
}

/// dy a (a = the gate where given) at column j of a row: the gradient reaching h s w.
template <typename Y, int V>
__device__ __forceinline__ void gatedGradient(const Y* dyr, const Y* ar, int j, float (&out)[V]) {
  loadF32<Y, V>(dyr + j, out);
  if (ar == nullptr) return;
  float av[V];
  loadF32<Y, V>(ar + j, av);
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] *= av[v];
}

/// dx (and dr) per row from dy, the gate (may be null), h, w, rstd and h's other gradient dhOut
/// (may be null); the gate's gradient dgate where asked.
template <typename X, typename R, typename Y, int V>
__global__ void __launch_bounds__(kThreads)
    rmsNormBackwardKernel(const Y* __restrict__ dy, const Y* __restrict__ gate, const X* __restrict__ h,
                          const float* __restrict__ w, const float* __restrict__ rstd,
                          const X* __restrict__ dhOut, X* __restrict__ dx, R* __restrict__ dr,
                          Y* __restrict__ dgate, int64_t rows, int D) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t base = row * D;
    const Y* ar = gate ? gate + base : nullptr;
    float dot = 0.0f;
    for (int j = lane * V; j < D; j += 32 * V) {
      float dyv[V], hv[V], wv[V];
      gatedGradient<Y, V>(dy + base, ar, j, dyv);
      loadF32<X, V>(h + base + j, hv);
      loadF32<float, V>(w + j, wv);
#pragma unroll
      for (int v = 0; v < V; ++v) dot += dyv[v] * wv[v] * hv[v];
    }
    const float s = rstd[row];
    const float c = s * s * warpSum(dot) / float(D);  // s^2 mean(g h)
    for (int j = lane * V; j < D; j += 32 * V) {
      float dyv[V], hv[V], wv[V], out[V];
      gatedGradient<Y, V>(dy + base, ar, j, dyv);
      loadF32<X, V>(h + base + j, hv);
      loadF32<float, V>(w + j, wv);
      if (dgate) {  // da = dy h s w, from dy itself
        float raw[V], da[V];
        loadF32<Y, V>(dy + base + j, raw);
#pragma unroll
        for (int v = 0; v < V; ++v) da[v] = raw[v] * hv[v] * s * wv[v];
        storeF32<Y, V>(dgate + base + j, da);
      }
#pragma unroll
      for (int v = 0; v < V; ++v) out[v] = s * (dyv[v] * wv[v] - hv[v] * c);
      if (dhOut) {
        float extra[V];
        loadF32<X, V>(dhOut + base + j, extra);
#pragma unroll
        for (int v = 0; v < V; ++v) out[v] += extra[v];
      }
      storeF32<X, V>(dx + base + j, out);
      if (dr) storeF32<R, V>(dr + base + j, out);
    }
  }
}

/// partial[slice, i] = sum over the slice's rows of dy_i a_i h_i s (a = the gate, 1 without one;
/// one thread per column).
template <typename X, typename Y>
__global__ void __launch_bounds__(kThreads)
    rmsNormDwPartialKernel(const Y* __restrict__ dy, const Y* __restrict__ gate, const X* __restrict__ h,
                           const float* __restrict__ rstd, float* __restrict__ partial, int64_t rows, int D) {
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= D) return;
  const int64_t first = int64_t(blockIdx.y) * kDwRowsPerSlice;
  const int64_t last = std::min(rows, first + kDwRowsPerSlice);
  float sum = 0.0f;
  for (int64_t row = first; row < last; ++row) {
    const float g = tile::toF32(dy[row * D + i]) * (gate ? tile::toF32(gate[row * D + i]) : 1.0f);
    sum += g * tile::toF32(h[row * D + i]) * rstd[row];
  }
  partial[int64_t(blockIdx.y) * D + i] = sum;
}

/// dw[i] = sum over the slices of partial[slice, i], in slice order.
__global__ void __launch_bounds__(kThreads)
    rmsNormDwReduceKernel(const float* __restrict__ partial, float* __restrict__ dw, int64_t slices, int D) {
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= D) return;
  float sum = 0.0f;
  for (int64_t s = 0; s < slices; ++s) sum += partial[s * D + i];
  dw[i] = sum;
}

/// Blocks for `rows` rows (a warp each).
unsigned rowGrid(int64_t rows) { return pointwise::gridBlocks((rows + kWarps - 1) / kWarps, kBlocksPerSm); }

int64_t dwSlices(int64_t rows) { return (rows + kDwRowsPerSlice - 1) / kDwRowsPerSlice; }

/// f(X{}, R{}, Y{}) for a supported combination of element types (see the file comment).
template <typename F>
void withTypes(const RmsNormTypes& t, F&& f) {
  using BF = __nv_bfloat16;
  if (t.x == DType::F32 && t.residual == DType::F32 && t.y == DType::F32) return f(float{}, float{}, float{});
  if (t.x == DType::F32 && t.residual == DType::BF16 && t.y == DType::BF16) return f(float{}, BF{}, BF{});
  if (t.x == DType::F32 && t.residual == DType::F16 && t.y == DType::F16) return f(float{}, __half{}, __half{});
  if (t.x == DType::BF16 && t.residual == DType::BF16 && t.y == DType::BF16) return f(BF{}, BF{}, BF{});
  if (t.x == DType::F16 && t.residual == DType::F16 && t.y == DType::F16) return f(__half{}, __half{}, __half{});
  LINAC_REQUIRE(false, "rmsNorm: unsupported element types (rmsNormSupported says which)");
}

void checkShape(const RmsNormShape& s) {
  LINAC_REQUIRE(s.rows >= 0 && s.dim > 0, "rmsNorm: rows must be >= 0 and dim > 0");
  LINAC_REQUIRE(s.eps > 0.0f, "rmsNorm: eps must be positive");
  LINAC_REQUIRE(int64_t(s.dim) <= int64_t(kThreads) * 65535, "rmsNorm: dim past the dw pass's grid");
  LINAC_REQUIRE(dwSlices(s.rows) <= 65535, "rmsNorm: rows past the dw pass's grid");
}

}  // namespace

bool rmsNormSupported(const RmsNormTypes& t) {
  const bool wide = t.x == DType::F32 && (t.residual == t.y) &&
                    (t.y == DType::F32 || t.y == DType::BF16 || t.y == DType::F16);
  const bool narrow = (t.x == DType::BF16 || t.x == DType::F16) && t.residual == t.x && t.y == t.x;
  return wide || narrow;
}

size_t rmsNormWorkspaceFloats(const RmsNormShape& shape) { return size_t(dwSlices(shape.rows)) * size_t(shape.dim); }

void rmsNormForward(const RmsNormTypes& types, const RmsNormShape& shape, const RmsNormForwardArgs& args,
                    cudaStream_t stream) {
  checkShape(shape);
  if (shape.rows == 0) return;
  LINAC_REQUIRE(args.x && args.weight && args.y && args.rstd, "rmsNormForward: null x, weight, y or rstd");
  LINAC_REQUIRE(!args.residual == !args.h, "rmsNormForward: h is written exactly when a residual is given");
  withTypes(types, [&](auto xZero, auto rZero, auto yZero) {
    using X = decltype(xZero);
    using R = decltype(rZero);
    using Y = decltype(yZero);
    const auto* x = static_cast<const X*>(args.x);
    const auto* r = static_cast<const R*>(args.residual);
    auto* y = static_cast<Y*>(args.y);
    auto* h = static_cast<X*>(args.h);
    const auto* gate = static_cast<const Y*>(args.gate);
    const bool vector = shape.dim % kVector == 0 &&
                        pointwise::aligned({x, h}, sizeof(X) * kVector) && pointwise::aligned({r}, sizeof(R) * kVector) &&
                        pointwise::aligned({y, gate}, sizeof(Y) * kVector) &&
                        pointwise::aligned({args.weight}, sizeof(float) * kVector);
    const unsigned grid = rowGrid(shape.rows);
    if (vector)
      rmsNormForwardKernel<X, R, Y, kVector><<<grid, kThreads, 0, stream>>>(
          x, r, args.weight, gate, y, h, args.rstd, shape.rows, shape.dim, shape.eps);
    else
      rmsNormForwardKernel<X, R, Y, 1><<<grid, kThreads, 0, stream>>>(x, r, args.weight, gate, y, h, args.rstd,
                                                                      shape.rows, shape.dim, shape.eps);
    LINAC_CUDA_CHECK_LAUNCH("rmsNormForwardKernel");
  });
}

void rmsNormBackward(const RmsNormTypes& types, const RmsNormShape& shape, const RmsNormBackwardArgs& args,
                     cudaStream_t stream) {
  checkShape(shape);
  if (shape.rows == 0) return;
  LINAC_REQUIRE(args.dy && args.h && args.weight && args.rstd && args.dx, "rmsNormBackward: null dy, h, weight, rstd or dx");
  LINAC_REQUIRE(!args.dweight || args.workspace, "rmsNormBackward: dweight needs the workspace");
  LINAC_REQUIRE(!args.dgate || args.gate, "rmsNormBackward: dgate needs the gate");
  withTypes(types, [&](auto xZero, auto rZero, auto yZero) {
    using X = decltype(xZero);
    using R = decltype(rZero);
    using Y = decltype(yZero);
    const auto* dy = static_cast<const Y*>(args.dy);
    const auto* h = static_cast<const X*>(args.h);
    const auto* dhOut = static_cast<const X*>(args.dhOut);
    auto* dx = static_cast<X*>(args.dx);
    auto* dr = static_cast<R*>(args.dresidual);
    const auto* gate = static_cast<const Y*>(args.gate);
    auto* dgate = static_cast<Y*>(args.dgate);
    const bool vector = shape.dim % kVector == 0 &&
                        pointwise::aligned({h, dhOut, dx}, sizeof(X) * kVector) &&
                        pointwise::aligned({dr}, sizeof(R) * kVector) &&
                        pointwise::aligned({dy, gate, dgate}, sizeof(Y) * kVector) &&
                        pointwise::aligned({args.weight}, sizeof(float) * kVector);
    const unsigned grid = rowGrid(shape.rows);
    if (vector)
      rmsNormBackwardKernel<X, R, Y, kVector><<<grid, kThreads, 0, stream>>>(
          dy, gate, h, args.weight, args.rstd, dhOut, dx, dr, dgate, shape.rows, shape.dim);
    else
      rmsNormBackwardKernel<X, R, Y, 1><<<grid, kThreads, 0, stream>>>(dy, gate, h, args.weight, args.rstd, dhOut,
                                                                       dx, dr, dgate, shape.rows, shape.dim);
    LINAC_CUDA_CHECK_LAUNCH("rmsNormBackwardKernel");
    if (!args.dweight) return;
    const unsigned columns = static_cast<unsigned>((shape.dim + kThreads - 1) / kThreads);
    const int64_t slices = dwSlices(shape.rows);
    rmsNormDwPartialKernel<X, Y><<<dim3(columns, static_cast<unsigned>(slices)), kThreads, 0, stream>>>(
        dy, gate, h, args.rstd, args.workspace, shape.rows, shape.dim);
    LINAC_CUDA_CHECK_LAUNCH("rmsNormDwPartialKernel");
    rmsNormDwReduceKernel<<<columns, kThreads, 0, stream>>>(args.workspace, args.dweight, slices, shape.dim);
    LINAC_CUDA_CHECK_LAUNCH("rmsNormDwReduceKernel");
  });
}

}  // namespace linac::kernels::cuda
