// X = (I + A)^-1 for the strictly lower triangular C x C matrix A of the delta rule's WY / UT form
// (delta_prepare.cuh, delta_bwd_prepare.cuh), in fp32 shared memory.
//
// unitLowerColumn(): one thread per column of X by forward substitution, x_i = delta_ij -
// sum_{s < i} A[i][s] x_s (64 threads, a 64-row chain each). Both preparations take it with
// LINAC_HOPPER_BLOCK_INVERSE=0.
//
// unitLowerInverse(), both preparations' default, works on two 32-row halves so that
// every warp of the warpgroup works and the longest dependent chain is a 32-row substitution:
//   X11 = (I + A11)^-1,  X22 = (I + A22)^-1   warps 0 and 1, a lane per column (unitLowerColumn)
//   Y   = A21 X11                              every thread, a 2 x 4 tile each
//   X21 = -X22 Y                               every thread
// (the last two are row block 2 of (I + A) X = I below the diagonal). fp32 throughout; only the
// order of the sums differs from the column substitution. In place, in the matrix that holds A
// ([C][ld] floats, row t, column s): X's strict lower part where A's was (the unit diagonal
// implicit); Y in the upper-right block, which A leaves zero and xAt() never reads.
#pragma once

#include "tiles.cuh"

#include <cstdint>

namespace linac::kernels::cuda::hopper {

constexpr int kInverseHalf = 32;  // rows of each half of the blockwise inverse

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
  return t > s ? a[t * ld + s] : (t == s ? 1.f : 0.f);
}

/// Four consecutive floats of shared memory (16-byte aligned) as a float4.
__device__ inline float4 ldsFloat4(const float* p) {
  const uint4 v = lds128(static_cast<uint32_t>(__cvta_generic_to_shared(p)));
  return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
}

__device__ inline void stsFloat4(float* p, float4 v) {
  sts128(static_cast<uint32_t>(__cvta_generic_to_shared(p)),
         make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z), __float_as_uint(v.w)));
}

/// Replaces A ([C][ld] fp32 shared, strictly lower, zeros elsewhere, 16-byte aligned rows) by
/// X = (I + A)^-1 in the layout above. Every one of the kThreads threads calls it; it ends with a
/// barrier.
template <int C, int kThreads>
__device__ void unitLowerInverse(float* a, int ld) {
  constexpr int H = kInverseHalf;
  static_assert(C == 2 * H && kThreads == 128, "two halves of 32 rows, a 2 x 4 tile a thread");
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // X11 and X22: warp w substitutes down column `lane` of diagonal block w, then writes it over
  // A's block once every lane of the warp has read the rows.
  if (warp < 2) {
    float* block = a + warp * H * (ld + 1);
    float x[H];
    unitLowerColumn<H>(block, ld, lane, x);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < H; ++i)
      if (i > lane) block[i * ld + lane] = x[i];
  }
  __syncthreads();

  // Both products: a thread owns rows r0, r0 + 1 and columns c0 .. c0 + 3 of the 32 x 32 result.
  // The stored blocks hold X's strict lower part and zeros (A's diagonal is 0), so each product
  // starts from the unit diagonal's term.
  const int r0 = 2 * (tid / 8), c0 = 4 * (tid % 8);
  float* a21 = a + H * ld;        // A21, then X21: rows H.., columns 0..
  float* y = a + H;               // Y: the upper-right block (A's zeros), rows 0.., columns H..
  const float* x22 = a21 + H;     // X22's strict lower part
  float4 acc[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) acc[r] = ldsFloat4(a21 + (r0 + r) * ld + c0);  // A21 I
#pragma unroll 8
  for (int k = 0; k < H; ++k) {  // Y = A21 X11
    const float4 xk = ldsFloat4(a + k * ld + c0);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float e = a21[(r0 + r) * ld + k];
      acc[r] = make_float4(fmaf(e, xk.x, acc[r].x), fmaf(e, xk.y, acc[r].y), fmaf(e, xk.z, acc[r].z),
                           fmaf(e, xk.w, acc[r].w));
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) stsFloat4(y + (r0 + r) * ld + c0, acc[r]);
  __syncthreads();
#pragma unroll 8
  for (int k = 0; k < H; ++k) {  // X21 = -(I + lower(X22)) Y: acc already holds I Y
    const float4 yk = ldsFloat4(y + k * ld + c0);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float e = x22[(r0 + r) * ld + k];
      acc[r] = make_float4(fmaf(e, yk.x, acc[r].x), fmaf(e, yk.y, acc[r].y), fmaf(e, yk.z, acc[r].z),
                           fmaf(e, yk.w, acc[r].w));
    }
  }
  // A21 is read only by the first product, so X21 may go over it while others still read Y, X22
#pragma unroll
  for (int r = 0; r < 2; ++r)
    stsFloat4(a21 + (r0 + r) * ld + c0, make_float4(-acc[r].x, -acc[r].y, -acc[r].z, -acc[r].w));
  __syncthreads();
}

}  // namespace linac::kernels::cuda::hopper
