// Pieces of the diagonal decay's Hopper gradient stage (diag_key_grad.cuh, whose header states
// the maths, and diag_value_grad.cuh): b's swizzled layout, the low 16-bit halves, the batched
// tile fills, the barriers, the decay chains' step.
#pragma once

#include "../chunk_slots.cuh"
#include "../cuda_check.h"
#include "chunk_grad.cuh"
#include "diag_grad_params.h"
#include "diagonal_prepare.cuh"

namespace linac::kernels::cuda::hopper {

constexpr int kDiagBlock = 16;                     // token block of the factorisation
constexpr int kDiagRefs = kChunk / kDiagBlock - 1; // references R_0 .. R_2

/// b's element (t, c): rows of DK floats, 8-float groups XOR-swizzled by t mod 8, so the eight row
/// groups of a wgmma accumulator read distinct banks (pairs (c, c + 1), c even, stay adjacent).
template <int DK>
__device__ __forceinline__ int bIndex(int t, int c) {
  return t * DK + (c ^ ((t & 7) << 3));
}

/// The low 16-bit half of fp32 pairs whose high half is pack2<T>(x.x, x.y): x - round(x).
template <class T>
__device__ __forceinline__ uint32_t lowHalf2(float2 x) {
  const float2 hi = unpack2<T>(pack2<T>(x.x, x.y));
  return pack2<T>(x.x - hi.x, x.y - hi.y);
}

/// For every channel pair (t, c), c even, of a [C, DK] tile, taken by kThreads threads from
/// `first` on: store(t, c, value(t, c)). A thread forms kBatch pairs' values (their loads
/// included) before it stores any of them: the shared-memory accesses are ordered asm, so a pair's
/// loads issued after the previous pair's store would each wait a round trip. The same pairs go
/// to the same thread as in a plain strided loop.
template <int C, int DK, int kThreads, class Value, class Store>
__device__ __forceinline__ void forEachTilePair(int first, Value value, Store store) {
  constexpr int kPairs = C * DK / 2, kBatch = 4;
  using V = decltype(value(0, 0));
#pragma unroll 1
  for (int i0 = first; i0 < kPairs; i0 += kThreads * kBatch) {
    V v[kBatch];
    CUTE_UNROLL
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * kThreads;
      if (i < kPairs) v[j] = value(i / (DK / 2), (i % (DK / 2)) * 2);
    }
    CUTE_UNROLL
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * kThreads;
      if (i < kPairs) store(i / (DK / 2), (i % (DK / 2)) * 2, v[j]);
    }
  }
}

/// Barrier over the whole CTA, called from each warpgroup's own branch (bar.sync counts warps, so
/// the three call sites meet).
__device__ __forceinline__ void ctaBarrier() { asm volatile("bar.sync 0;\n" ::: "memory"); }

/// Barrier over one warpgroup (ids 1..3; 0 is the CTA's).
__device__ __forceinline__ void warpgroupBarrier(int wg) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(wg + 1), "n"(kWarpgroupThreads) : "memory");
}

/// Accumulator registers a chain pass carries a running product for: the diagonal loops take the
/// accumulator's columns in parts of 16 registers, so 16 products sit beside the 64 sums.
template <int N>
constexpr int chainParts() {
  return N / 16 > 0 ? N / 16 : 1;
}

/// One step of a diagonal block's decay chains over accumulator registers [part, part + kRegs)
/// (pairs of adjacent columns), whose rows are this thread's two, accRow and accRow + 8:
/// f <- f a + e (a: the step's row of e^{g}; e: 1 at the step where a row's chain starts, else 0,
/// f being 0 before it), then acc += d x f (x: the step's operand row in `tile`; d: the step's D
/// entry for each row). dq walks s down the block with x = k_s, dk walks t up it with x = q_t.
template <class T, int kRegs, class Acc, class Coords, class Tile>
__device__ __forceinline__ void chainStep(Acc& acc, float (&f)[kRegs], int part, const Coords& coords,
                                          int accRow, const float* a, const Tile& tile, int xRow,
                                          float2 d, float2 e) {
  CUTE_UNROLL
  for (int j = 0; j < kRegs; j += 2) {
    const int i = part + j, c = get<1>(coords(i));
    const bool low = get<0>(coords(i)) == accRow;
    const float dd = low ? d.x : d.y, ee = low ? e.x : e.y;
    const float2 ac = *reinterpret_cast<const float2*>(a + c);
    f[j] = fmaf(f[j], ac.x, ee);
    f[j + 1] = fmaf(f[j + 1], ac.y, ee);
    const float2 x = unpack2<T>(lds32(tile.at(xRow, c)));
    acc(i) += dd * x.x * f[j];
    acc(i + 1) += dd * x.y * f[j + 1];
  }
}

}  // namespace linac::kernels::cuda::hopper
