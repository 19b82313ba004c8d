// X = (I + A)^-1 for the strictly lower triangular C x C matrix A of the delta rule's WY / UT form
// (delta_prepare.cuh), in fp32 shared memory, by 16 x 16 blocks so that every thread of the CTA
// works and no dependency chain is longer than a block: with blocks a, b of kBlock rows,
//   X_aa = (I + A_aa)^-1                       forward substitution, one thread per block column
//   X_ab = -X_aa (sum_{b <= c < a} A_ac X_cb)  for a > b, by distance a - b = 1, 2, 3
// (the second line is row block a of (I + A) X = I below the diagonal). fp32 throughout, as the
// column substitution it replaces; only the order of the sums differs.
//
// In place, in the matrix that holds A ([C][ld] floats, row t, column s): X_aa's strictly lower
// part overwrites A_aa's (its unit diagonal is implicit); X_ab (a > b) goes to the mirrored block of
// the upper triangle, element (t, s) at [s][t], which A leaves zero and nothing else reads. xAt()
// reads X back from that layout.
//
// unitLowerColumn() is the default both preparations take (delta_prepare.cuh, delta_bwd_prepare.cuh):
// one thread per column of X by forward substitution, x_i = delta_ij - sum_{s < i} A[i][s] x_s.
#pragma once

#include "tiles.cuh"

#include <cstdint>

namespace linac::kernels::cuda::hopper {

constexpr int kInverseBlock = 16;  // rows per block of the blockwise inverse

/// Column j of X = (I + A)^-1 in x, by forward substitution in fp32 (A [C][ld] fp32 in shared
/// memory, strictly lower, 16-byte aligned rows: ld is a multiple of 4). Every thread reads the same
/// rows, as broadcast 16-byte loads (lds128: written as a plain float4 read, the compiler split each
/// into four 4-byte loads, one per FMA: 2,016 of each per column at C = 64, ncu's largest share of
/// the preparation). Each row's sum runs as four partial sums, one per lane of the vector, added
/// pairwise at the end: the dependent chain of row i is ~i / 4 FMAs instead of i.
template <int C>
__device__ void unitLowerColumn(const float* a, int ld, int j, float (&x)[C]) {
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(a));
#pragma unroll
  for (int i = 0; i < C; ++i) {
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    const uint32_t row = base + uint32_t(i * ld) * sizeof(float);
#pragma unroll
    for (int e4 = 0; e4 < (i + 3) / 4; ++e4) {
      const uint4 a4 = lds128(row + e4 * sizeof(float4));
      s0 = fmaf(__uint_as_float(a4.x), x[4 * e4], s0);
      if (4 * e4 + 1 < i) s1 = fmaf(__uint_as_float(a4.y), x[4 * e4 + 1], s1);
      if (4 * e4 + 2 < i) s2 = fmaf(__uint_as_float(a4.z), x[4 * e4 + 2], s2);
      if (4 * e4 + 3 < i) s3 = fmaf(__uint_as_float(a4.w), x[4 * e4 + 3], s3);
    }
    x[i] = (i == j ? 1.f : 0.f) - ((s0 + s1) + (s2 + s3));
  }
}

/// X[t][s] from the layout unitLowerInverse() leaves in `a` (row stride ld).
__device__ inline float xAt(const float* a, int ld, int t, int s) {
  if (t / kInverseBlock == s / kInverseBlock) return t > s ? a[t * ld + s] : (t == s ? 1.f : 0.f);
  return t > s ? a[s * ld + t] : 0.f;
}

/// Replaces A ([C][ld] fp32 shared, strictly lower, zeros elsewhere) by X = (I + A)^-1 in the layout
/// above. Every one of the kThreads threads calls it; it ends with a barrier.
template <int C, int kThreads>
__device__ void unitLowerInverse(float* a, int ld) {
  constexpr int NB = kInverseBlock, kBlocks = C / NB;
  static_assert(C % NB == 0 && kBlocks * NB <= kThreads, "one thread per block column");
  const int tid = threadIdx.x;

  // Diagonal blocks: thread (block, column j) substitutes down its column in registers, then
  // writes it once every thread of the block has read the rows it needs.
  float x[NB];
  const int blk = tid / NB, j = tid % NB, r0 = blk * NB;
  const bool diagonalWorker = tid < kBlocks * NB;
  if (diagonalWorker) {
#pragma unroll
    for (int i = 0; i < NB; ++i) {
      const float* row = a + (r0 + i) * ld + r0;
      float s = 0.f;
#pragma unroll
      for (int k = 0; k < i; ++k) s += row[k] * x[k];
      x[i] = (i == j ? 1.f : 0.f) - s;
    }
  }
  __syncthreads();
  if (diagonalWorker) {
#pragma unroll
    for (int i = 0; i < NB; ++i)
      if (i > j) a[(r0 + i) * ld + r0 + j] = x[i];
  }
  __syncthreads();

  // Off-diagonal blocks by distance d: first Y_ab = sum_c A_ac X_cb into X_ab's slot (reading only
  // blocks of smaller distance), then X_ab = -X_aa Y_ab in registers and back into the slot.
  constexpr int kPerBlock = NB * NB;
  constexpr int kMaxItems = (kBlocks - 1) * kPerBlock;  // distance 1 has the most blocks
  constexpr int kPerThread = (kMaxItems + kThreads - 1) / kThreads;
#pragma unroll
  for (int d = 1; d < kBlocks; ++d) {
    const int items = (kBlocks - d) * kPerBlock;
    float y[kPerThread];
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int item = tid + e * kThreads;
      y[e] = 0.f;
      if (item >= items) continue;
      const int b = item / kPerBlock, ab = b + d;  // block (ab, b)
      const int t = ab * NB + (item % kPerBlock) / NB, s = b * NB + item % NB;
      const float* rowA = a + t * ld;
      float acc0 = 0.f, acc1 = 0.f;  // two chains: even and odd k
      for (int k = b * NB; k < ab * NB; k += 2) {
        acc0 += rowA[k] * xAt(a, ld, k, s);
        acc1 += rowA[k + 1] * xAt(a, ld, k + 1, s);
      }
      y[e] = acc0 + acc1;
    }
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int item = tid + e * kThreads;
      if (item >= items) continue;
      const int b = item / kPerBlock, ab = b + d;
      const int t = ab * NB + (item % kPerBlock) / NB, s = b * NB + item % NB;
      a[s * ld + t] = y[e];
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int item = tid + e * kThreads;
      if (item >= items) continue;
      const int b = item / kPerBlock, ab = b + d;
      const int ti = (item % kPerBlock) / NB, t = ab * NB + ti, s = b * NB + item % NB;
      float acc = a[s * ld + t];  // X_aa's unit diagonal times Y_ab
      for (int k = 0; k < ti; ++k) acc += a[t * ld + ab * NB + k] * a[s * ld + ab * NB + k];
      y[e] = -acc;
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int item = tid + e * kThreads;
      if (item >= items) continue;
      const int b = item / kPerBlock, ab = b + d;
      const int t = ab * NB + (item % kPerBlock) / NB, s = b * NB + item % NB;
      a[s * ld + t] = y[e];
    }
    __syncthreads();
  }
}

}  // namespace linac::kernels::cuda::hopper
