// Bulk tensor copies (TMA) into the swizzled tiles of tiles.cuh, completing on mbarriers.
//
// A tile's stage is copied as boxes of (W contiguous elements, R rows), W the width of its swizzle
// atom (64 elements of 16 bits for the 128-byte swizzle, 32 for 64, 16 for 32): tiles.cuh tiles
// the atom down the rows first, so box j (columns [jW, (j + 1)W)) is R * W contiguous elements at
// j R W, and the copy engine's swizzle (16-byte chunk bits 4-6 XOR address bits 7-9 for 128 bytes)
// is the atom's (Swizzle<3, 4, 3> on byte addresses). Rows outside the tensor map's extent are
// filled with zeros, so a batch's last partial chunk needs no masking; inside a packed (varlen)
// batch the next sequence's tokens follow, and the kernels take those chunks by cp.async instead.
//
// Host side: tensor maps are encoded per launch (a host-only call, no device work) through the
// driver's cuTensorMapEncodeTiled, found with cudaGetDriverEntryPointByVersion so nothing links
// libcuda; a map that cannot be encoded (no driver entry point, an unaligned pointer or stride, a
// coordinate past int32) leaves the launch on its cp.async path.
#pragma once

#include "tiles.cuh"

#include <cuda.h>

#include <cstdint>

namespace linac::kernels::cuda::hopper {

__device__ inline uint32_t sharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Adds `bytes` to the transactions the current phase of `bar` waits for (before the copies that
/// complete them are issued, by the thread that issues them, ahead of its own arrival).
__device__ inline void barrierExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(sharedAddress(bar)),
               "r"(bytes)
               : "memory");
}

/// One box of a 2-D / 4-D tensor map at the given coordinates (innermost first) into shared memory
/// at `dst`, completing its bytes on `bar`.
__device__ inline void bulkLoad2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(sharedAddress(bar))
      : "memory");
}
__device__ inline void bulkLoad4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                  uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(sharedAddress(bar))
      : "memory");
}

/// Where a sequence's chunks sit in the token maps (encodeTokenMap): sequence n of a padded batch
/// from token 0, or a packed batch's one sequence from the sequence's first token `bos`.
template <int C>
struct TokenMapOrigin {
  int seq;        // the maps' sequence coordinate
  int64_t first;  // the maps' token coordinate of the sequence's first token
  /// The token coordinate of chunk c's first row.
  __device__ int chunk(int64_t c) const { return int(first + c * C); }
};

template <int C, class P>
__device__ inline TokenMapOrigin<C> tokenMapOrigin(const P& p, int n, int64_t bos) {
  return {p.cu_seqlens ? 0 : n, p.cu_seqlens ? bos : 0};
}

/// Elements of 16 bits per row of a box into a tile whose contiguous extent is `extent` (the
/// swizzle atom's width, tiles.cuh swizzleAtom).
template <int extent>
constexpr int boxWidth() {
  return extent % 64 == 0 ? 64 : extent % 32 == 0 ? 32 : 16;
}

/// The shared-memory layout a box lands in: the tile's element (r, c) of stage 0 (c contiguous,
/// r the row; a ColTile is indexed (c, r)) at r W + c within box c / W, boxes R W apart.
template <class L, bool kColMajor, int R, int Cc>
constexpr bool boxesMatch() {
  constexpr int W = boxWidth<Cc>();
  auto offset = [](int r, int c) {
    return int(kColMajor ? L{}.layout_b()(c, r, 0) : L{}.layout_b()(r, c, 0));
  };
  return offset(0, 1) == 1 && offset(1, 0) == W && offset(R - 1, W - 1) == (R - 1) * W + W - 1 &&
         (Cc == W || offset(0, W) == R * W) && offset(R - 1, Cc - 1) == R * Cc - 1;
}

/// Calls issue(shared address, column) for each box of stage `stage` of `dst` ([R, Cc], Cc
/// contiguous in global memory and in the tile), its columns from `col` on.
template <bool kColMajor, int R, int Cc, class T, class L, class Issue>
__device__ void forEachBox(const SmemTile<T, L>& dst, int stage, int col, Issue issue) {
  constexpr int W = boxWidth<Cc>();
  static_assert(boxesMatch<L, kColMajor, R, Cc>(), "the tile's stage is not a sequence of (W, R) boxes");
  CUTE_UNROLL
  for (int j = 0; j < Cc / W; ++j)
    issue(kColMajor ? dst.at(j * W, 0, stage) : dst.at(0, j * W, stage), col + j * W);
}

/// Issues stage `stage` of `dst` from a 4-D map (columns, heads, tokens, sequences) at column
/// `col`, head `h`, token `t` of sequence `n`, completing on `bar` (R * Cc elements). One thread
/// calls it.
template <bool kColMajor, int R, int Cc, class T, class L>
__device__ void bulkLoadTile4d(const SmemTile<T, L>& dst, int stage, const CUtensorMap* map, int col, int h,
                               int t, int n, uint64_t* bar) {
  forEachBox<kColMajor, R, Cc>(dst, stage, col, [&](uint32_t at, int c) { bulkLoad4d(at, map, c, h, t, n, bar); });
}

/// The same from a 2-D map (columns, rows) at column `col`, row `row`.
template <bool kColMajor, int R, int Cc, class T, class L>
__device__ void bulkLoadTile2d(const SmemTile<T, L>& dst, int stage, const CUtensorMap* map, int col,
                               int row, uint64_t* bar) {
  forEachBox<kColMajor, R, Cc>(dst, stage, col, [&](uint32_t at, int c) { bulkLoad2d(at, map, c, row, bar); });
}

/// A state pass's chunk: its [C, DK] key-side tile (row-major, from `keys` at column 0) and its
/// [C, BV] value-side tile (column-major, from `values` at column v0), stage `stage` of each,
/// announced on `bar` and issued at token `t` of sequence `n`, head `h`. One thread calls it; every
/// thread that waits on `bar` still arrives.
template <int C, int DK, int BV, class T, class LK, class LV>
__device__ void bulkLoadKeyValueChunk(const SmemTile<T, LK>& keyTile, const SmemTile<T, LV>& valueTile, int stage,
                                      const CUtensorMap* keys, const CUtensorMap* values, int v0, int h, int t,
                                      int n, uint64_t* bar) {
  barrierExpectBytes(bar, (C * DK + C * BV) * sizeof(T));
  bulkLoadTile4d<false, C, DK>(keyTile, stage, keys, 0, h, t, n, bar);
  bulkLoadTile4d<true, C, BV>(valueTile, stage, values, v0, h, t, n, bar);
}

// ---- host ----------------------------------------------------------------------------------------

/// cuda.h's cuTensorMapEncodeTiled, called through the driver's entry point (declared, not linked).
using TensorMapEncoder = decltype(&cuTensorMapEncodeTiled);

/// The driver's tensor-map encoder, or null where the driver has none.
inline TensorMapEncoder tensorMapEncoder() {
  static const TensorMapEncoder encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return TensorMapEncoder{nullptr};
    }
    return reinterpret_cast<TensorMapEncoder>(fn);
  }();
  return encode;
}

template <class T>
constexpr CUtensorMapDataType tensorMapType() {
  static_assert(sizeof(T) == 2, "16-bit elements");
  return std::is_same_v<T, cute::bfloat16_t> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

constexpr CUtensorMapSwizzle tensorMapSwizzle(int boxBytes) {
  return boxBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
         : boxBytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                          : CU_TENSOR_MAP_SWIZZLE_32B;
}

/// Encodes a map of a row-major tensor of `rank` dims (dims[0] contiguous; strides in elements of
/// dims 1..rank-1), read by boxes of box[i] elements per dim. False when it cannot be encoded (no
/// driver entry point, a base or stride not 16-byte aligned, an extent past int32).
inline bool encodeMap(CUtensorMap* map, CUtensorMapDataType type, int elementBytes,
                      CUtensorMapSwizzle swizzle, const void* base, int rank, const int64_t* dims,
                      const int64_t* strides, const int* box) {
  const TensorMapEncoder encode = tensorMapEncoder();
  if (encode == nullptr || base == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  cuuint64_t globalDim[5], globalStride[4];
  cuuint32_t boxDim[5], elementStride[5];
  for (int i = 0; i < rank; ++i) {
    if (dims[i] <= 0 || dims[i] > INT32_MAX) return false;
    globalDim[i] = cuuint64_t(dims[i]);
    boxDim[i] = cuuint32_t(box[i]);
    elementStride[i] = 1;
    if (i > 0) {
      const int64_t bytes = strides[i - 1] * elementBytes;
      if (bytes % 16 != 0) return false;
      globalStride[i - 1] = cuuint64_t(bytes);
    }
  }
  return encode(map, type, cuuint32_t(rank), const_cast<void*>(base), globalDim, globalStride, boxDim,
                elementStride, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/// A map of a 16-bit tensor read into tiles whose contiguous extent is `extent`: boxes of
/// (W = boxWidth<extent>, 1, ..., rows), `rows` the box extent of dim `rowDim` (the others 1).
template <class T, int extent>
bool encodeBoxMap(CUtensorMap* map, const void* base, int rank, const int64_t* dims,
                  const int64_t* strides, int rowDim, int rows) {
  constexpr int W = boxWidth<extent>();
  int box[5];
  for (int i = 0; i < rank; ++i) box[i] = i == 0 ? W : i == rowDim ? rows : 1;
  return encodeMap(map, tensorMapType<T>(), int(sizeof(T)), tensorMapSwizzle(W * int(sizeof(T))), base,
                   rank, dims, strides, box);
}

/// A map of an fp32 tensor read by unswizzled boxes of (width, 1, ..., rows) (width at most 256
/// elements), each landing as a dense [rows, width] array.
inline bool encodeFloatMap(CUtensorMap* map, const float* base, int rank, const int64_t* dims,
                           const int64_t* strides, int width, int rowDim, int rows) {
  int box[5];
  for (int i = 0; i < rank; ++i) box[i] = i == 0 ? width : i == rowDim ? rows : 1;
  return width <= 256 && encodeMap(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, CU_TENSOR_MAP_SWIZZLE_NONE,
                                   base, rank, dims, strides, box);
}

/// The token and sequence extents of the token maps: a padded batch's sequences, or a packed
/// (varlen) batch as one sequence of all its tokens (whose seq_len is that count).
struct TokenExtent {
  int64_t seqLen;  // tokens per sequence
  int64_t seqs;    // sequences
};

template <class P>
TokenExtent tokenExtent(const P& p) {
  return {p.seq_len, p.cu_seqlens ? 1 : p.num_seqs};
}

/// A map of a [sequences, tokens, heads, width] tensor (width contiguous) read by
/// (boxWidth<extent>, 1, rows, 1) boxes.
template <class T, int extent>
bool encodeTokenMap(CUtensorMap* map, const void* base, int64_t width, int64_t heads, TokenExtent tokens,
                    int rows) {
  const int64_t dims[4] = {width, heads, tokens.seqLen, tokens.seqs};
  const int64_t strides[3] = {width, heads * width, tokens.seqLen * heads * width};
  return encodeBoxMap<T, extent>(map, base, 4, dims, strides, 2, rows);
}

/// The same for fp32, by unswizzled (boxColumns, 1, rows, 1) boxes.
inline bool encodeFloatTokenMap(CUtensorMap* map, const float* base, int64_t width, int64_t heads,
                                TokenExtent tokens, int boxColumns, int rows) {
  const int64_t dims[4] = {width, heads, tokens.seqLen, tokens.seqs};
  const int64_t strides[3] = {width, heads * width, tokens.seqLen * heads * width};
  return encodeFloatMap(map, base, 4, dims, strides, boxColumns, 2, rows);
}

}  // namespace linac::kernels::cuda::hopper
