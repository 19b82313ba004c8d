// The short causal depthwise convolution with its activation (fla's ShortConvolution, which uses
// causal-conv1d's kernels), forward and backward, on x [B, T, C] (channels innermost, as the
// projections write it) and a weight [C, W] (torch's depthwise conv1d weight [C, 1, W]).
//
// Forward, per channel c (x_s = 0 for s < 0; every sum in fp32):
//   z_t = sum_{j=0}^{W-1} w_j x_{t-W+1+j},   y_t = act(z_t).
// This is torch::conv1d(x^T, w, padding W-1, groups C)'s first T outputs: w_{W-1} takes x_t.
// Packed documents (positions p_t, each token's offset in its document): the term of lag
// W-1-j enters z_t only when W-1-j <= p_t, so no output reads the document before its own; the
// backward drops the same terms (dx_s takes dz_{t'} of lag t' - s only when t' - s <= p_{t'},
// dw_j takes dz_t x_{t-W+1+j} only when W-1-j <= p_t).
// Backward, from dy, with the pre-activation z recomputed from x (nothing saved but x and w):
//   dz_t = dy_t act'(z_t),
//   dx_s = sum_{j} w_j dz_{s+W-1-j}             (dz_t = 0 for t >= T),
//   dw_j = sum_{b,t} dz_t x_{t-W+1+j}.
//
// One thread owns V consecutive channels over a tile of kTimeTile consecutive tokens of one
// sequence, reading and writing them as one kVectorBytes access (V = 4 for bf16 / fp16, 2 for
// fp32; V = 1 when C is not a multiple of V or a tensor is not so aligned); consecutive threads
// take consecutive channels, so every load and store of a warp is one contiguous run of C-major
// memory. The thread walks its tile in time order with the last W inputs in registers (a
// sliding window, W a template parameter so the window stays in registers), so each input is
// read once plus a W-1 token halo at the tile's start. The backward walk runs W-1 tokens past
// its tile's end (reading the next tile's inputs) to have dz_{s..s+W-1} for every dx_s of its
// tile, and keeps the dz window likewise. dw is summed per thread over its tile, written to a
// workspace [B * tiles, C, W], then summed over the tiles by a second kernel in a fixed order
// (no atomics: the same inputs give the same bits).
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "pointwise.cuh"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace linac::kernels::cuda {
namespace {

/// Threads per block, tokens per thread, and the bytes of a thread's vector access.
constexpr int kThreadsPerBlock = 128;
constexpr int kTimeTile = 64;
constexpr int kVectorBytes = 8;
/// Threads per block of the dw reduction (one (channel, tap) each).
constexpr int kReduceThreads = 256;

using pointwise::Pack;
using pointwise::sigmoidF32;

/// act(z) in fp32.
__device__ __forceinline__ float activate(ShortConvActivation a, float z) {
  switch (a) {
    case ShortConvActivation::None: return z;
    case ShortConvActivation::Silu: return z * sigmoidF32(z);
    case ShortConvActivation::Sigmoid: return sigmoidF32(z);
    case ShortConvActivation::Relu: return z > 0.0f ? z : 0.0f;
    case ShortConvActivation::Tanh: return tanhf(z);
    case ShortConvActivation::Elu1: return z > 0.0f ? z + 1.0f : expm1f(z) + 1.0f;  // elu(z) + 1
  }
  return z;
}

/// act'(z) in fp32 (relu' and elu' at 0 taken from the left, as torch's backward does).
__device__ __forceinline__ float activateGrad(ShortConvActivation a, float z) {
  switch (a) {
    case ShortConvActivation::None: return 1.0f;
    case ShortConvActivation::Silu: {
      const float s = sigmoidF32(z);
      return s * (1.0f + z * (1.0f - s));
    }
    case ShortConvActivation::Sigmoid: {
      const float s = sigmoidF32(z);
      return s * (1.0f - s);
    }
    case ShortConvActivation::Relu: return z > 0.0f ? 1.0f : 0.0f;
    case ShortConvActivation::Tanh: {
      const float t = tanhf(z);
      return 1.0f - t * t;
    }
    case ShortConvActivation::Elu1: return z > 0.0f ? 1.0f : expf(z);
  }
  return 1.0f;
}

/// wc[v][j] = w[c + v, j]: the taps of the thread's V channels.
template <int V, int W>
__device__ __forceinline__ void loadTaps(const float* __restrict__ w, int64_t c, float (&wc)[V][W]) {
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int j = 0; j < W; ++j) wc[v][j] = w[(c + v) * W + j];
}

/// xw[v][j] = x_{t0-W+1+j} of the thread's channel v for j < W - 1 (the inputs before the tile,
/// zero before the sequence); x points at the thread's (b, 0, c).
template <typename T, int W, int V>
__device__ __forceinline__ void loadHistory(const T* __restrict__ x, int64_t t0, int64_t channels,
                                            float (&xw)[V][W]) {
#pragma unroll
  for (int j = 0; j < W - 1; ++j) {
    const int64_t s = t0 - (W - 1) + j;
    Pack<T, V> p{};
    if (s >= 0) p = *reinterpret_cast<const Pack<T, V>*>(x + s * channels);
#pragma unroll
    for (int v = 0; v < V; ++v) xw[v][j] = s >= 0 ? tile::toF32(p.v[v]) : 0.0f;
  }
}

/// Lags up to this reach every input of a row (no packed documents).
constexpr int64_t kWholeRow = INT64_MAX;

/// The offset of token t in its document: positions[(b, t)], or kWholeRow without positions.
__device__ __forceinline__ int64_t positionAt(const int64_t* __restrict__ positions, int64_t row, int64_t t) {
  return positions ? positions[row + t] : kWholeRow;
}

/// Grid: (ceil(C / (kThreadsPerBlock * V)), ceil(T / kTimeTile), B); one thread per V channels
/// and tile. C % V == 0 and the tensors aligned to V elements (the launcher checks).
template <typename T, int W, int V>
__global__ void __launch_bounds__(kThreadsPerBlock)
    shortConvForwardKernel(const T* __restrict__ x,               // [B, T, C]
                           const float* __restrict__ w,           // [C, W]
                           T* __restrict__ y,                     // [B, T, C]
                           const int64_t* __restrict__ positions,  // [B, T] or null
                           int64_t seqLen, int64_t channels, ShortConvActivation act) {
  using P = Pack<T, V>;
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;  // first of the thread's channels
  if (c >= channels) return;
  const int64_t t0 = int64_t(blockIdx.y) * kTimeTile;
  const int64_t t1 = min(t0 + kTimeTile, seqLen);
  const int64_t base = int64_t(blockIdx.z) * seqLen * channels + c;  // (b, 0, c)
  const int64_t row = int64_t(blockIdx.z) * seqLen;                  // (b, 0) in positions
  float wc[V][W];
  loadTaps<V, W>(w, c, wc);
  float xw[V][W];  // xw[v][j] = x_{t-W+1+j} of channel c + v
  loadHistory<T, W, V>(x + base, t0, channels, xw);
  for (int64_t t = t0; t < t1; ++t) {
    const P in = *reinterpret_cast<const P*>(x + base + t * channels);
    const int64_t pos = positionAt(positions, row, t);
    P out;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      xw[v][W - 1] = tile::toF32(in.v[v]);
      float z = 0.0f;
#pragma unroll
      for (int j = 0; j < W; ++j)
        if (W - 1 - j <= pos) z += wc[v][j] * xw[v][j];
      out.v[v] = tile::fromF32<T>(activate(act, z));
#pragma unroll
      for (int j = 0; j < W - 1; ++j) xw[v][j] = xw[v][j + 1];
    }
    *reinterpret_cast<P*>(y + base + t * channels) = out;
  }
}

/// Same grid as the forward. dx (may be null) for the thread's tile; dwPartial (may be null)
/// [B * tiles, C, W]: the tile's share of dw.
template <typename T, int W, int V>
__global__ void __launch_bounds__(kThreadsPerBlock)
    shortConvBackwardKernel(const T* __restrict__ x,               // [B, T, C]
                            const float* __restrict__ w,           // [C, W]
                            const T* __restrict__ dy,              // [B, T, C]
                            T* __restrict__ dx,                    // [B, T, C] or null
                            float* __restrict__ dwPartial,         // [B * tiles, C, W] or null
                            const int64_t* __restrict__ positions,  // [B, T] or null
                            int64_t seqLen, int64_t channels, ShortConvActivation act) {
  using P = Pack<T, V>;
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;  // first of the thread's channels
  if (c >= channels) return;
  const int64_t t0 = int64_t(blockIdx.y) * kTimeTile;
  const int64_t t1 = min(t0 + kTimeTile, seqLen);
  const int64_t base = int64_t(blockIdx.z) * seqLen * channels + c;  // (b, 0, c)
  float wc[V][W];
  loadTaps<V, W>(w, c, wc);
  float xw[V][W];   // xw[v][j] = x_{t-W+1+j} of channel c + v
  float dzw[V][W];  // dzw[v][k] = dz_{t-W+1+k}; entries before t0 are never read into dx
  float dwAcc[V][W];
  int64_t posw[W];  // posw[k] = positions_{t-W+1+k}, as dzw
  const int64_t row = int64_t(blockIdx.z) * seqLen;  // (b, 0) in positions
#pragma unroll
  for (int j = 0; j < W; ++j) posw[j] = kWholeRow;
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int j = 0; j < W; ++j) dzw[v][j] = 0.0f, dwAcc[v][j] = 0.0f;
  loadHistory<T, W, V>(x + base, t0, channels, xw);
  // t runs to t1 + W - 2: the last dx of the tile, dx_{t1-1}, needs dz up to t1 + W - 2.
  for (int64_t t = t0; t < t1 + W - 1; ++t) {
    const bool inside = t < seqLen;  // dz_t = 0 past the sequence's end
    P xin{}, dyin{};
    if (inside) {
      xin = *reinterpret_cast<const P*>(x + base + t * channels);
      dyin = *reinterpret_cast<const P*>(dy + base + t * channels);
    }
    const int64_t s = t - (W - 1);  // the token whose dx is now complete
    posw[W - 1] = inside ? positionAt(positions, row, t) : kWholeRow;  // dz_t = 0 there anyway
    const int64_t pos = posw[W - 1];
    P dxout;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      float dz = 0.0f;
      if (inside) {
        xw[v][W - 1] = tile::toF32(xin.v[v]);
        float z = 0.0f;
#pragma unroll
        for (int j = 0; j < W; ++j)
          if (W - 1 - j <= pos) z += wc[v][j] * xw[v][j];
        dz = tile::toF32(dyin.v[v]) * activateGrad(act, z);
        if (t < t1) {
#pragma unroll
          for (int j = 0; j < W; ++j)
            if (W - 1 - j <= pos) dwAcc[v][j] += dz * xw[v][j];
        }
      }
      dzw[v][W - 1] = dz;
      // dx_s = sum_j w_j dz_{t-j}: output t - j reads x_s at lag W-1-j, within its document
      // when W-1-j <= positions_{t-j} = posw[W-1-j].
      float d = 0.0f;
#pragma unroll
      for (int j = 0; j < W; ++j)
        if (W - 1 - j <= posw[W - 1 - j]) d += wc[v][j] * dzw[v][W - 1 - j];
      dxout.v[v] = tile::fromF32<T>(d);
#pragma unroll
      for (int j = 0; j < W - 1; ++j) xw[v][j] = xw[v][j + 1], dzw[v][j] = dzw[v][j + 1];
    }
#pragma unroll
    for (int j = 0; j < W - 1; ++j) posw[j] = posw[j + 1];
    if (dx && s >= t0) *reinterpret_cast<P*>(dx + base + s * channels) = dxout;
  }
  if (dwPartial) {
    const int64_t row = int64_t(blockIdx.z) * gridDim.y + blockIdx.y;  // (b, tile)
    float* out = dwPartial + (row * channels + c) * W;  // V * W consecutive floats
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int j = 0; j < W; ++j) out[v * W + j] = dwAcc[v][j];
  }
}

/// dw [C * W] = sum over rows of partial [rows, C * W], rows in order (deterministic).
__global__ void __launch_bounds__(kReduceThreads)
    reduceDweightKernel(const float* __restrict__ partial, float* __restrict__ dw, int64_t rows, int64_t width) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= width) return;
  float sum = 0.0f;
  for (int64_t r = 0; r < rows; ++r) sum += partial[r * width + i];
  dw[i] = sum;
}

dim3 tileGrid(const ShortConvShape& s, int vector) {
  const int64_t perBlock = int64_t(kThreadsPerBlock) * vector;
  return dim3(static_cast<unsigned>((s.channels + perBlock - 1) / perBlock),
              static_cast<unsigned>((s.seqLen + kTimeTile - 1) / kTimeTile), static_cast<unsigned>(s.batch));
}

int64_t tileRows(const ShortConvShape& s) { return s.batch * ((s.seqLen + kTimeTile - 1) / kTimeTile); }

void checkShape(const ShortConvShape& s) {
  LINAC_REQUIRE(s.batch >= 0 && s.seqLen >= 0 && s.channels >= 0, "shortConv: negative extent");
  LINAC_REQUIRE(s.width >= 1 && s.width <= kShortConvMaxWidth,
                "shortConv: width " + std::to_string(s.width) + " outside [1, " +
                    std::to_string(kShortConvMaxWidth) + "]");
  LINAC_REQUIRE(s.batch <= 65535 && (s.seqLen + kTimeTile - 1) / kTimeTile <= 65535,
                "shortConv: batch or seq_len past the launch grid's limits");
}

/// f(std::integral_constant<int, W>{}) for the runtime width W in [1, kShortConvMaxWidth].
template <typename F>
void withWidth(int width, F&& f) {
  static_assert(kShortConvMaxWidth == 8, "withWidth lists every width up to kShortConvMaxWidth");
  switch (width) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: LINAC_REQUIRE(false, "shortConv: width " + std::to_string(width) + " is not compiled");
  }
}

}  // namespace

size_t shortConvWorkspaceFloats(const ShortConvShape& shape) {
  return static_cast<size_t>(tileRows(shape) * shape.channels * shape.width);
}

void shortConvForward(DType dtype, ShortConvActivation activation, const ShortConvShape& shape,
                      const ShortConvForwardArgs& args, cudaStream_t stream) {
  checkShape(shape);
  if (shape.batch == 0 || shape.seqLen == 0 || shape.channels == 0) return;
  LINAC_REQUIRE(args.x && args.weight && args.y, "shortConvForward: null x, weight or y");
  pointwise::withElementType(dtype, "shortConv", [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = kVectorBytes / sizeof(T);
    const bool vectorized = shape.channels % kVec == 0 && pointwise::aligned({args.x, args.y}, kVectorBytes);
    withWidth(shape.width, [&](auto width) {
      constexpr int W = decltype(width)::value;
      auto launch = [&](auto kernel, int vector) {
        kernel<<<tileGrid(shape, vector), kThreadsPerBlock, 0, stream>>>(
            static_cast<const T*>(args.x), args.weight, static_cast<T*>(args.y), args.positions, shape.seqLen,
            shape.channels, activation);
        LINAC_CUDA_CHECK_LAUNCH("shortConvForwardKernel");
      };
      if (vectorized) launch(shortConvForwardKernel<T, W, kVec>, kVec);
      else launch(shortConvForwardKernel<T, W, 1>, 1);
    });
  });
}

void shortConvBackward(DType dtype, ShortConvActivation activation, const ShortConvShape& shape,
                       const ShortConvBackwardArgs& args, cudaStream_t stream) {
  checkShape(shape);
  LINAC_REQUIRE(args.x && args.weight && args.dy, "shortConvBackward: null x, weight or dy");
  LINAC_REQUIRE(!args.dweight || args.workspace, "shortConvBackward: dweight wanted without a workspace");
  if (!args.dx && !args.dweight) return;
  const int64_t taps = shape.channels * shape.width;
  if (shape.batch == 0 || shape.seqLen == 0 || shape.channels == 0) {
    if (args.dweight && taps > 0) LINAC_CUDA_CHECK(cudaMemsetAsync(args.dweight, 0, taps * sizeof(float), stream));
    return;
  }
  pointwise::withElementType(dtype, "shortConv", [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = kVectorBytes / sizeof(T);
    const bool vectorized = shape.channels % kVec == 0 && pointwise::aligned({args.x, args.dy, args.dx}, kVectorBytes);
    withWidth(shape.width, [&](auto width) {
      constexpr int W = decltype(width)::value;
      auto launch = [&](auto kernel, int vector) {
        kernel<<<tileGrid(shape, vector), kThreadsPerBlock, 0, stream>>>(
            static_cast<const T*>(args.x), args.weight, static_cast<const T*>(args.dy), static_cast<T*>(args.dx),
            args.dweight ? args.workspace : nullptr, args.positions, shape.seqLen, shape.channels, activation);
        LINAC_CUDA_CHECK_LAUNCH("shortConvBackwardKernel");
      };
      if (vectorized) launch(shortConvBackwardKernel<T, W, kVec>, kVec);
      else launch(shortConvBackwardKernel<T, W, 1>, 1);
    });
  });
  if (args.dweight) {
    const auto blocks = static_cast<unsigned>((taps + kReduceThreads - 1) / kReduceThreads);
    reduceDweightKernel<<<blocks, kReduceThreads, 0, stream>>>(args.workspace, args.dweight, tileRows(shape), taps);
    LINAC_CUDA_CHECK_LAUNCH("reduceDweightKernel");
  }
}

}  // namespace linac::kernels::cuda
