// What the fused training kernels share (short_conv.cu, swiglu.cu, l2_norm.cu, and those like them):
// vector accesses, fp32 helpers, the element-type dispatch and the launch-size helpers.
#pragma once

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "device_info.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace linac::kernels::cuda::pointwise {

/// V consecutive elements, loaded and stored as one access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

__device__ __forceinline__ float sigmoidF32(float z) { return 1.0f / (1.0f + expf(-z)); }

/// The sum of x over the warp, in every lane.
__device__ __forceinline__ float warpSum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// Whether every one of `pointers` (null ones aside) is aligned to `bytes`.
inline bool aligned(std::initializer_list<const void*> pointers, size_t bytes) {
  for (const void* p : pointers)
    if (p && reinterpret_cast<uintptr_t>(p) % bytes != 0) return false;
  return true;
}

/// Blocks for a grid-stride loop that needs `needed` blocks: enough to fill the current device
/// (`perSm` blocks per multiprocessor), no more than the work needs, at least one.
inline unsigned gridBlocks(int64_t needed, int perSm) {
  const int64_t sms = multiprocessorCount();
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(needed, sms * perSm)));
}

/// f(T{}) for the element type of `dtype` (fp32, bf16, fp16); `op` names the caller in the error.
template <typename F>
void withElementType(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32: f(float{}); break;
    case DType::BF16: f(__nv_bfloat16{}); break;
    case DType::F16: f(__half{}); break;
    default: LINAC_REQUIRE(false, std::string(op) + ": unknown dtype");
  }
}

}  // namespace linac::kernels::cuda::pointwise
