// How the chunk forward skeleton (chunk_forward.cuh) obtains q, k, decay and beta: a `Roles`
// policy type chosen at instantiation.
//   MaterializedRoles  reads them from tensors the caller computed (the kernel library's own
//                      instantiations, used by ops::recurrence);
//   a generated policy (generated/<variant>/<variant>_cuda.cu) computes the ones its spec defines
//                      by expressions from the raw operands (kernels/common/fused.h), while the
//                      chunk is loaded, and may L2-normalise the q / k tiles in shared memory.
// A policy declares:
//   kKind                               the variant's RecurrenceKind
//   kComputeQ, kComputeK                q / k computed per (token, channel) by q(at) / k(at)
//   kNormQ, kNormK                      the q / k tile is L2-normalised per row in the kernel
// Computed and normalised q / k are rounded to the kernel's element type, as a tile of that dtype
// would be (decay and beta stay fp32, as their materialised tensors are).
//   kComputeDecay, kComputeBeta         decay(at) / beta(at), per element of the decay class
// where `at` is a RoleAt: at(j) is operand j of the role at the element being computed.
#pragma once

#include "../common/fused.h"
#include "tile.cuh"

namespace linac::kernels::cuda {

/// The q, k, g and beta tensors of ChunkFwdParams are read as given.
struct MaterializedRoles {
  static constexpr bool kComputeQ = false, kComputeK = false;
  static constexpr bool kNormQ = false, kNormK = false;
  static constexpr bool kComputeDecay = false, kComputeBeta = false;
};

/// A role's operands at one (batch, token, head, channel) position; at(j) reads operand j as fp32
/// (the role's tile operand, when it has one, comes prefetched in `tileValue`; operands constant
/// along the channel can be read once per row into `row` by loadRow()).
struct RoleAt {
  const RoleOperands& role;
  int64_t b, t;
  int h, c;
  float tileValue = 0.f;
  float row[kMaxRoleOperands] = {};
  bool rowLoaded = false;

  /// Reads every operand that does not vary along the channel (per token, per head, scalars).
  __device__ __forceinline__ void loadRow() {
#pragma unroll
    for (int j = 0; j < kMaxRoleOperands; ++j)  // unrolled: `row` stays in registers
      if (j < role.count && j != role.tile && role.operands[j].strides[3] == 0) row[j] = load(j);
    rowLoaded = true;
  }

  __device__ __forceinline__ float operator()(int j) const {
    if (j == role.tile) return tileValue;
    if (rowLoaded && role.operands[j].strides[3] == 0) return row[j];
    return load(j);
  }

  __device__ __forceinline__ float load(int j) const {
    const FusedOperand& x = role.operands[j];
    const int64_t at = b * x.strides[0] + t * x.strides[1] + int64_t(h) * x.strides[2] +
                       int64_t(c) * x.strides[3];
    switch (x.dtype) {
      case DType::BF16: return tile::toF32(__ldg(static_cast<const __nv_bfloat16*>(x.data) + at));
      case DType::F16: return tile::toF32(__ldg(static_cast<const __half*>(x.data) + at));
      case DType::F32: break;
    }
    return __ldg(static_cast<const float*>(x.data) + at);
  }
};

/// Register-staged [ROWS x COLS] chunk of a computed per-channel role (q, k, diagonal decay).
/// fetch() issues 16-byte loads of the role's tile operand (`RoleOperands::tile`: dtype T,
/// contiguous [.., COLS] rows) into registers, as a q / k tile is staged, so the loads overlap the
/// current chunk's compute; commit(at, fn) evaluates fn(at) for this thread's elements, with
/// `at(r)` the role's RoleAt at chunk row r (channel and tile element filled in, operands constant
/// along the channel read once per vector), and stores it to fp32 shared memory. Rows >=
/// rows_valid store 0 (a padded token's role is 0, whatever its expression gives at 0).
/// Whole block calls.
template <typename T, int ROWS, int COLS, int NTHREADS>
struct RoleFetcher {
  using Staged = tile::ChunkFetcher<T, ROWS, COLS, NTHREADS>;
  static constexpr int V = Staged::V, VPR = Staged::VPR, TOTAL = Staged::TOTAL, ITERS = Staged::ITERS;
  Staged staged;  // the tile operand's raw elements (zeros without one)
  int valid = 0;

  /// `src` is the tile operand at the chunk's first token (null: the role has none).
  __device__ __forceinline__ void fetch(const T* __restrict__ src, int64_t row_stride, int rows_valid) {
    valid = rows_valid;
    staged.fetch(src, row_stride, src ? rows_valid : 0);  // 0 valid rows: no loads, all zeros
  }
  template <typename AtRow, typename Fn>
  __device__ __forceinline__ void commit(float* __restrict__ dst, int lds, AtRow&& atRow, Fn&& fn) const {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int i = threadIdx.x + it * NTHREADS;
      if (i >= TOTAL) break;
      const int r = i / VPR, c = (i - r * VPR) * V;
      const T* e = reinterpret_cast<const T*>(&staged.regs[it]);
      if (r >= valid) {
#pragma unroll
        for (int j = 0; j < V; ++j) dst[r * lds + c + j] = 0.f;
        continue;
      }
      RoleAt at = atRow(r);
      at.loadRow();
#pragma unroll
      for (int j = 0; j < V; ++j) {
        at.c = c + j;
        at.tileValue = tile::toF32<T>(e[j]);
        dst[r * lds + c + j] = fn(at);
      }
    }
  }
};

/// x rounded to the element type T and back (identity for fp32): a computed or normalised q / k
/// holds the values a materialised tile of dtype T would, so the backward (which recomposes the
/// roles in T) differentiates the forward that ran.
template <typename T>
__device__ __forceinline__ float roundTo(float x) {
  return tile::toF32<T>(tile::fromF32<T>(x));
}

/// Row t of a [rows x COLS] fp32 shared tile (leading dimension lds) divided by
/// sqrt(sum of squares + kL2NormEps) and rounded to T, for every row; one warp per row at a time.
/// Zero rows stay 0.
template <typename T, int COLS>
__device__ __forceinline__ void l2NormalizeRows(float* tile, int lds, int rows, int warp, int warps) {
  const int lane = threadIdx.x & 31;
  for (int t = warp; t < rows; t += warps) {
    float* row = tile + t * lds;
    float ss = 0.f;
#pragma unroll
    for (int c = lane; c < COLS; c += 32) ss += row[c] * row[c];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float inv = 1.f / sqrtf(ss + kL2NormEps);
#pragma unroll
    for (int c = lane; c < COLS; c += 32) row[c] = roundTo<T>(row[c] * inv);
  }
}

}  // namespace linac::kernels::cuda
