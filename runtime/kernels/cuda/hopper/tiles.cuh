// The small tile library of linac's Hopper (sm_90a) kernels, over CuTe (CUTLASS 4.2 headers).
//
// Every tile the tensor cores read lives in shared memory in a GMMA canonical layout with the
// 128-byte swizzle, so wgmma reads it without bank conflicts and CuTe builds its descriptors
// (a layout that is not canonical fails to compile instead of computing garbage). Two kinds:
//   RowTile<T, R, Cc>   [R, Cc] with Cc contiguous: a K-major operand whose reduction dim is Cc
//                       (rows of q, k, w, P; S^T as [v, d]).
//   ColTile<T, N, K>    (N, K) with N contiguous: an MN-major operand, a [K][N] row-major block of
//                       global memory such as a [t][v] tile of values read as (v, t).
// Transposed(L) views a RowTile [R, Cc] as (Cc, R) with R contiguous, so the k tile [t][d] is also
// the MN-major (d, t) operand of K^T V without a second copy.
//
// One warpgroup (128 threads) issues each product: gemm<zero>(mma, A, B, acc) over the k blocks,
// bracketed by issue() / commitAndWait(), or split into batches (commitBatch() after each, then
// waitBatches<pending>() oldest first). Accumulator elements are addressed through
// accCoords(mma, shape), the (row, col) of each register, so masks, decays and stores never
// depend on the fragment layout.
#pragma once

#include <cute/arch/copy_sm80.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace linac::kernels::cuda::hopper {

using namespace cute;

/// The CuTe element type of a kernel dtype (same bits as cuda_bf16.h's / cuda_fp16.h's types).
template <typename T> struct CuteType;
template <> struct CuteType<__nv_bfloat16> { using type = cute::bfloat16_t; };
template <> struct CuteType<__half> { using type = cute::half_t; };

constexpr int kWarpgroupThreads = 128;
// sm_90's shared memory a SM; each resident CTA also holds 1 KB of it for the system
constexpr int kSharedBytesPerSm = 228 * 1024;
constexpr int kSharedBytesReservedPerCta = 1024;

/// The widest swizzle atom whose contiguous extent (in elements of 16 bits) divides `extent`.
template <class T, int extent, bool kMajorK>
constexpr auto swizzleAtom() {
  static_assert(sizeof(T) == 2, "16-bit elements");
  if constexpr (extent % 64 == 0)
    return std::conditional_t<kMajorK, GMMA::Layout_K_SW128_Atom<T>, GMMA::Layout_MN_SW128_Atom<T>>{};
  else if constexpr (extent % 32 == 0)
    return std::conditional_t<kMajorK, GMMA::Layout_K_SW64_Atom<T>, GMMA::Layout_MN_SW64_Atom<T>>{};
  else {
    static_assert(extent % 16 == 0, "tile extents are multiples of 16");
    return std::conditional_t<kMajorK, GMMA::Layout_K_SW32_Atom<T>, GMMA::Layout_MN_SW32_Atom<T>>{};
  }
}

template <class T, int R, int Cc, int Stages = 1>
using RowTile = decltype(tile_to_shape(swizzleAtom<T, Cc, true>(),
                                       Shape<Int<R>, Int<Cc>, Int<Stages>>{}));
template <class T, int N, int K, int Stages = 1>
using ColTile = decltype(tile_to_shape(swizzleAtom<T, N, false>(),
                                       Shape<Int<N>, Int<K>, Int<Stages>>{}));
/// (Cc, R, Stages) view of a RowTile<T, R, Cc, Stages>.
template <class Row, int R, int Cc, int Stages = 1>
using Transposed = decltype(composition(
    Row{}, make_layout(Shape<Int<Cc>, Int<R>, Int<Stages>>{}, Stride<Int<R>, _1, Int<R * Cc>>{})));

/// A one-warpgroup tiled MMA computing an (M, N) fp32 tile from A (M, K) and B (N, K) operands in
/// shared memory with the given majors.
template <class T, int M, int N, int K, GMMA::Major MajorA, GMMA::Major MajorB>
using WarpgroupMma = decltype(make_tiled_mma(
    GMMA::ss_op_selector<T, T, float, Shape<Int<M>, Int<N>, Int<K>>, MajorA, MajorB>()));

template <class Layout, class T>
__device__ auto smemTensor(T* p, Layout layout) {
  return make_tensor(make_smem_ptr(p), layout);
}

/// (row, col) of every accumulator register of `mma` for an (M, N) product, for this thread.
template <int M, int N, class Mma>
__device__ auto accCoords(const Mma& mma) {
  return mma.get_thread_slice(threadIdx.x % kWarpgroupThreads)
      .partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
}
/// The same for thread index `thread` (threadIndexHere() inside a loop keeps the coordinates, and
/// the shared addresses made from them, from being hoisted out of the loop into registers).
template <int M, int N, class Mma>
__device__ auto accCoords(const Mma& mma, int thread) {
  return mma.get_thread_slice(thread % kWarpgroupThreads)
      .partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
}

/// acc (+)= A B^T over every k block of the fragments (descriptor tensors from
/// partition_fragment_A / _B). Must sit between issue() and commitAndWait().
template <bool kZeroInit, class Mma, class FA, class FB, class Acc>
__device__ void gemm(Mma& mma, const FA& a, const FB& b, Acc& acc) {
  mma.accumulate_ = kZeroInit ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int kb = 0; kb < size<2>(a); ++kb) {
    cute::gemm(mma, a(_, _, kb), b(_, _, kb), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

/// acc = A B^T where `first`, else acc += A B^T: a term of a sum over blocks, `first` for the
/// first (a loop index compared with 0 in an unrolled loop, so no branch stays between the
/// warpgroup's arrive and its commit).
template <class Mma, class FA, class FB, class Acc>
__device__ void gemmTerm(bool first, Mma& mma, const FA& a, const FB& b, Acc& acc) {
  if (first) gemm<true>(mma, a, b, acc);
  else gemm<false>(mma, a, b, acc);
}

/// Orders this thread's register writes to the accumulators before the warpgroup's products.
template <class... Acc>
__device__ void issue(Acc&... acc) {
  (warpgroup_fence_operand(acc), ...);
  warpgroup_arrive();
}
/// Closes the batch of products issued since issue() and waits until they are complete.
template <class... Acc>
__device__ void commitAndWait(Acc&... acc) {
  warpgroup_commit_batch();
  warpgroup_wait<0>();
  (warpgroup_fence_operand(acc), ...);
}

/// Closes the batch of products issued since issue() or the last commitBatch(), without waiting;
/// waitBatches() then waits for the oldest batches first (a product chain split into batches).
__device__ inline void commitBatch() { warpgroup_commit_batch(); }

/// Waits until at most kPending committed batches are still running, then orders this thread's
/// reads of `acc` (the accumulators of the finished batches only) after them.
template <int kPending, class... Acc>
__device__ void waitBatches(Acc&... acc) {
  warpgroup_wait<kPending>();
  (warpgroup_fence_operand(acc), ...);
}

/// Makes this thread's ordinary shared-memory stores (and completed cp.async copies) visible to
/// the tensor cores' async proxy; a barrier must follow before another thread's wgmma reads them.
__device__ inline void fenceToAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// Aligns the dynamic shared memory to 1024 bytes (the 128-byte swizzle's period) and returns it
/// as the stage's layout.
template <class Smem>
__device__ Smem& alignedSmem(uint8_t* raw) {
  const uint32_t pad = (1024u - (static_cast<uint32_t>(__cvta_generic_to_shared(raw)) & 1023u)) & 1023u;
  return *reinterpret_cast<Smem*>(raw + pad);
}

/// A tile of layout L (RowTile, ColTile, Transposed) in shared memory. Elements are addressed by
/// their 32-bit shared-window address, so accesses compile to LDS / STS with the swizzle folded
/// into a few integer operations; tensor() is the CuTe view the wgmma descriptors are built from.
template <class T, class L>
struct SmemTile {
  uint32_t base;  // shared address, 1024-byte aligned
  T* ptr;         // the same memory as a generic pointer

  __device__ auto tensor() const { return make_tensor(make_smem_ptr(ptr), L{}); }
  /// Shared address of element (i, j) of stage s: the unswizzled byte offset, then the atom's
  /// swizzle, which acts on byte addresses (checked against CuTe's own tensors on the host).
  __device__ uint32_t at(int i, int j, int s = 0) const {
    const uint32_t linear = uint32_t(L{}.layout_b()(i, j, s)) * uint32_t(sizeof(T));
    return base + uint32_t(L{}.layout_a()(linear));
  }
};

template <class T, class L>
__device__ SmemTile<T, L> smemTile(T* p, L) {
  return {static_cast<uint32_t>(__cvta_generic_to_shared(p)), p};
}

/// The same tile, its pointer passed through an opaque move where it is used: wgmma operand
/// descriptors built from it inside a loop are then rebuilt there (a few integer operations)
/// instead of hoisted out as loop invariants, each two registers per k block held across the loop.
template <class T, class L>
__device__ SmemTile<T, L> fresh(const SmemTile<T, L>& t) {
  uint64_t p = reinterpret_cast<uint64_t>(t.ptr);
  asm volatile("mov.b64 %0, %0;\n" : "+l"(p));
  return {t.base, reinterpret_cast<T*>(p)};
}

__device__ inline void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ inline void sts16(uint32_t addr, uint16_t v) {
  asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(addr), "h"(v) : "memory");
}
__device__ inline uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ inline uint16_t lds16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.b16 %0, [%1];\n" : "=h"(v) : "r"(addr) : "memory");
  return v;
}
__device__ inline void sts128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ inline uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

/// Two floats rounded to T, packed low / high into 32 bits; and back.
template <class T>
__device__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, cute::bfloat16_t>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}
template <class T>
__device__ uint16_t pack1(float x) {
  return T(x).raw();
}
template <class T>
__device__ float unpack1(uint16_t v) {
  if constexpr (std::is_same_v<T, cute::bfloat16_t>) {
    return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(&v));
  } else {
    return __half2float(*reinterpret_cast<const __half*>(&v));
  }
}
template <class T>
__device__ float2 unpack2(uint32_t v) {
  if constexpr (std::is_same_v<T, cute::bfloat16_t>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
}

/// Calls f(i, row, col) for each even register i of an accumulator with coordinates `coords`
/// (accCoords of Mma): registers i and i + 1 hold (row, col) and (row, col + 1), as the wgmma
/// accumulator layouts keep column pairs in consecutive registers (asserted on Mma's CLayout).
template <class Mma, class Coords, class F>
__device__ void forEachPair(const Coords& coords, F&& f) {
  static_assert(decltype(stride<1, 0>(typename Mma::Atom::LayoutC_TV{}))::value == 64,
                "wgmma accumulator: consecutive registers are adjacent columns of a 64-row tile");
  CUTE_UNROLL
  for (int i = 0; i < size(coords); i += 2) f(i, int(get<0>(coords(i))), int(get<1>(coords(i))));
}

/// Sum over the four lanes that share an accumulator row (the wgmma C layout's quads).
__device__ inline float quadRowSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/// Column sums over each warp's 16 rows of a quantity laid out as a 64-row wgmma accumulator:
/// value(i, row, col) for this thread's register i at (row, col) of accCoords `coords` (N columns).
/// The quad's partial for each column pair is reduced over the eight lanes that share its columns
/// (a fixed shuffle tree), and lanes 0-3 write out[warp * C + col]: four rows of partial sums,
/// which the reader adds in warp order (deterministic).
template <class Mma, int N, class Coords, class F>
__device__ void warpColumnSums(const Coords& coords, F&& value, float* out, int C) {
  using CLayout = typename Mma::Atom::LayoutC_TV;
  static_assert(decltype(stride<1, 0>(CLayout{}))::value == 64 &&
                    decltype(stride<1, 1>(CLayout{}))::value == 8,
                "registers 4j..4j+3 hold (r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1)");
  const int lane = threadIdx.x & 31, warp = (threadIdx.x % kWarpgroupThreads) / 32;
  CUTE_UNROLL
  for (int i = 0; i < N / 2; i += 4) {
    const int r = int(get<0>(coords(i))), c = int(get<1>(coords(i)));
    float s0 = value(i, r, c) + value(i + 2, r + 8, c);
    float s1 = value(i + 1, r, c + 1) + value(i + 3, r + 8, c + 1);
    CUTE_UNROLL
    for (int o = 4; o < 32; o <<= 1) {
      s0 += __shfl_xor_sync(0xffffffffu, s0, o);
      s1 += __shfl_xor_sync(0xffffffffu, s1, o);
    }
    if (lane < 4) *reinterpret_cast<float2*>(&out[warp * C + c]) = make_float2(s0, s1);
  }
}

/// Row dots of an accumulator with a [row, column] tile (stage `stage`): for the two rows of this
/// thread's quad (r0, the row of its first register, and r0 + 8), the sum over the columns of
/// acc(row, column) * tile(row, column), reduced over the quad; the quad's first lane writes
/// out[r0] and out[r0 + 8]. Coordinates as forEachPair's.
template <class Mma, class Coords, class Acc, class Tile>
__device__ void accRowDots(const Coords& coords, const Acc& acc, const Tile& tile, int stage, float* out) {
  using T = std::remove_cv_t<std::remove_pointer_t<decltype(tile.ptr)>>;
  const int r0 = int(get<0>(coords(0)));
  float s0 = 0.f, s1 = 0.f;
  forEachPair<Mma>(coords, [&](int i, int row, int col) {
    const float2 x = unpack2<T>(lds32(tile.at(row, col, stage)));
    const float part = acc(i) * x.x + acc(i + 1) * x.y;
    if (row == r0) s0 += part;
    else s1 += part;
  });
  s0 = quadRowSum(s0);
  s1 = quadRowSum(s1);
  if ((threadIdx.x & 3) == 0) {
    out[r0] = s0;
    out[r0 + 8] = s1;
  }
}

/// 16-byte global -> shared copy through cp.async; zero-fills the destination when !valid (the
/// source is then not read, but must still be a mapped address).
__device__ inline void copy16(uint32_t smem, const void* gmem, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(bytes)
               : "memory");
}
/// 4-byte global -> shared copy through cp.async (zero-fill when !valid, as copy16).
__device__ inline void copy4(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(valid ? 4 : 0)
               : "memory");
}
__device__ inline void copyCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ inline void copyWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Copy groups that one warpgroup can wait for while the others compute: every thread of the CTA
// issues its share of a group's cp.async copies, then copyArrive() on the group's mbarrier (set up
// by barrierInit with the CTA's thread count, before any thread arrives); barrierWait() returns
// once every thread's copies up to its arrival have landed, and makes them visible to the waiting
// thread (a fenceToAsyncProxy() must still precede a wgmma that reads them).
__device__ inline void barrierInit(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(bar))),
               "r"(count)
               : "memory");
}
/// The executing thread's arrival on `bar`, made once all of its cp.async copies so far have landed.
__device__ inline void copyArrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
               : "memory");
}
/// Waits for phase `parity` (0 for the first) of `bar` to complete.
__device__ inline void barrierWait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LAB_WAIT;\n"
      "}\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))),
      "r"(parity)
      : "memory");
}

/// Copies rows [0, R) of a global [R, Cc] block (row r at `src + r * rowStride` elements, Cc
/// contiguous) into stage `stage` of tile `dst`, indexed (r, c) for a RowTile or (c, r) for a
/// ColTile (kColMajor); rows at or past `rows` are zero-filled. All kThreads threads call it.
template <bool kColMajor, int R, int Cc, int kThreads, class T, class Tile>
__device__ void loadTile(const Tile& dst, int stage, const T* src, int64_t rowStride, int rows) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kPerRow = Cc / kVec;
  constexpr int kTotal = R * kPerRow;
  static_assert(Cc % kVec == 0, "rows are copied in 16-byte vectors");
  CUTE_UNROLL
  for (int k = 0; k < (kTotal + kThreads - 1) / kThreads; ++k) {
    const int i = int(threadIdx.x) % kThreads + k * kThreads;
    if (kTotal % kThreads != 0 && i >= kTotal) break;
    const int r = i / kPerRow, c = (i % kPerRow) * kVec;
    const bool valid = r < rows;
    const T* g = src + (valid ? int64_t(r) * rowStride + c : 0);
    copy16(kColMajor ? dst.at(c, r, stage) : dst.at(r, c, stage), g, valid);
  }
}

/// Zeroes rows [from, R) of stage `stage` of tile `dst` ([R, Cc] as loadTile indexes it), in
/// 16-byte stores. All kThreads threads call it.
template <bool kColMajor, int R, int Cc, int kThreads, class Tile>
__device__ void zeroRows(const Tile& dst, int stage, int from) {
  constexpr int kVec = 8;  // 16-bit elements per 16 bytes
  static_assert(Cc % kVec == 0, "rows are zeroed in 16-byte vectors");
  for (int i = int(threadIdx.x) % kThreads + from * (Cc / kVec); i < R * (Cc / kVec); i += kThreads) {
    const int r = i / (Cc / kVec), c = (i % (Cc / kVec)) * kVec;
    sts128(kColMajor ? dst.at(c, r, stage) : dst.at(r, c, stage), make_uint4(0, 0, 0, 0));
  }
}

}  // namespace linac::kernels::cuda::hopper
