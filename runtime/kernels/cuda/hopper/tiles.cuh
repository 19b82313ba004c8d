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
// bracketed by issue() / commitAndWait(). Accumulator elements are addressed through
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

namespace linac::kernels::cuda::hopper {

using namespace cute;

/// The CuTe element type of a kernel dtype (same bits as cuda_bf16.h's / cuda_fp16.h's types).
template <typename T> struct CuteType;
template <> struct CuteType<__nv_bfloat16> { using type = cute::bfloat16_t; };
template <> struct CuteType<__half> { using type = cute::half_t; };

constexpr int kWarpgroupThreads = 128;

template <class T, int R, int Cc, int Stages = 1>
using RowTile = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{},
                                       Shape<Int<R>, Int<Cc>, Int<Stages>>{}));
template <class T, int N, int K, int Stages = 1>
using ColTile = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<T>{},
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

/// Makes this thread's ordinary shared-memory stores (and completed cp.async copies) visible to
/// the tensor cores' async proxy; a barrier must follow before another thread's wgmma reads them.
__device__ inline void fenceToAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// 16-byte global -> shared copy through cp.async; zero-fills the destination when !valid (the
/// source is then not read, but must still be a mapped address).
__device__ inline void copy16(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = cast_smem_ptr_to_uint(smem);
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(bytes)
               : "memory");
}
__device__ inline void copyCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ inline void copyWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

/// Copies rows [0, R) of a global [R, Cc] block (row r at `src + r * rowStride` elements, Cc
/// contiguous) into the tile view `dst` indexed (r, c) (RowTile) or (c, r) (ColTile, kColMajor);
/// rows at or past `rows` are zero-filled. All kThreads threads call it.
template <bool kColMajor, int R, int Cc, int kThreads, class T, class Dst>
__device__ void loadTile(Dst dst, const T* src, int64_t rowStride, int rows) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kPerRow = Cc / kVec;
  static_assert(Cc % kVec == 0, "rows are copied in 16-byte vectors");
  for (int i = threadIdx.x; i < R * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = (i % kPerRow) * kVec;
    const bool valid = r < rows;
    const T* g = src + (valid ? int64_t(r) * rowStride + c : 0);
    T* s = kColMajor ? &dst(c, r) : &dst(r, c);
    copy16(s, g, valid);
  }
}

/// Stores accumulator `acc` (coordinates `coords`, accCoords) rounded to T at addr(row, col),
/// skipping elements for which addr returns null. Two elements whose addresses are adjacent (as
/// the wgmma accumulator layouts put adjacent columns in consecutive registers) go in one 4-byte
/// store.
template <class T, class Acc, class Coords, class Addr>
__device__ void storePairs(const Acc& acc, const Coords& coords, Addr&& addr) {
  static_assert(decltype(size(acc))::value % 2 == 0, "accumulators hold pairs");
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    T* p = addr(get<0>(coords(i)), get<1>(coords(i)));
    T* q = addr(get<0>(coords(i + 1)), get<1>(coords(i + 1)));
    if (p != nullptr && q == p + 1 && (reinterpret_cast<uintptr_t>(p) & 3) == 0) {
      static_assert(sizeof(T) == 2, "16-bit elements");
      const uint32_t lo = T(acc(i)).raw(), hi = T(acc(i + 1)).raw();
      *reinterpret_cast<uint32_t*>(p) = lo | (hi << 16);
    } else {
      if (p != nullptr) *p = T(acc(i));
      if (q != nullptr) *q = T(acc(i + 1));
    }
  }
}

}  // namespace linac::kernels::cuda::hopper
