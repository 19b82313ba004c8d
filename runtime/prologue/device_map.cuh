// What the generated device maps (generated/<variant>/<variant>_cuda.cu) share: reading a
// strided operand at a 4-d index, the grid-stride loop bounds, the launch configuration and the
// launch check. CUDA only (nvcc); no torch.
#pragma once

#include "registry/registry.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace linac::prologue::device {

using runtime::kDeviceMapRank;
using runtime::MapShape;
using runtime::StridedOperand;

/// Threads per block of every device map: elementwise work, no shared memory.
inline constexpr int kThreadsPerBlock = 256;
/// Grid size cap: enough resident blocks to saturate an H200 many times over; the grid-stride
/// loops cover larger results.
inline constexpr int64_t kMaxBlocks = 65536;

/// A position in the (up to) 4-d index space of a result.
struct Index4 {
  int64_t at[kDeviceMapRank];
};

/// Number of elements of `shape`.
__host__ __device__ __forceinline__ int64_t numel(const MapShape& shape) {
  int64_t n = 1;
  for (int d = 0; d < kDeviceMapRank; ++d) n *= shape.sizes[d];
  return n;
}

/// The 4-d position of row-major element `flat` of `shape`.
__device__ __forceinline__ Index4 unravel(int64_t flat, const MapShape& shape) {
  Index4 index;
  for (int d = kDeviceMapRank - 1; d > 0; --d) {
    index.at[d] = flat % shape.sizes[d];
    flat /= shape.sizes[d];
  }
  index.at[0] = flat;
  return index;
}

/// The element of `operand` at `index` (through the read-only data cache: broadcast operands
/// such as per-head parameters are read by many threads).
__device__ __forceinline__ float load(const StridedOperand& operand, const Index4& index) {
  int64_t offset = 0;
  for (int d = 0; d < kDeviceMapRank; ++d) offset += index.at[d] * operand.strides[d];
  return __ldg(operand.data + offset);
}

/// The first element this thread handles in a grid-stride loop (64-bit: results may exceed 2^31).
__device__ __forceinline__ int64_t firstElement() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// The distance between the elements one thread handles in a grid-stride loop.
__device__ __forceinline__ int64_t gridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

/// Blocks to launch for `count` > 0 elements.
inline unsigned blocksFor(int64_t count) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (count + kThreadsPerBlock - 1) / kThreadsPerBlock));
}

/// Throws std::runtime_error naming `what` when the last launch failed.
inline void checkLaunch(const char* what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("cannot launch ") + what + ": " + cudaGetErrorString(status));
}

}  // namespace linac::prologue::device
