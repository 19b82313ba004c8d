// A tiny ThunderKittens-style tile toolkit for linac's CUDA skeletons (sm_80+; built for sm_90a).
//  * element conversion bf16 / fp16 / fp32 <-> fp32
//  * chunk loads: a [rows x cols] slice of a [B, T, H, D] tensor -> fp32 shared memory, zero padded
//  * warp-level tensor-core products: mma.sync m16n8k8 tf32 with fp32 accumulators, either plain
//    (bf16/fp16 inputs: their values are exact in tf32, intermediates keep 11 bits) or 3xTF32
//    (fp32 inputs: a = hi + lo split, ~fp32 accuracy) selected by a template flag.
//  * fragment layout helpers and a generic warp tile product over functor-defined operands, so the
//    skeletons can scale operands by decay factors while loading fragments.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace linac::kernels::cuda::tile {

// ---- element conversion ------------------------------------------------------------------------
template <typename T> __device__ __forceinline__ float toF32(T x);
template <> __device__ __forceinline__ float toF32<float>(float x) { return x; }
template <> __device__ __forceinline__ float toF32<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <> __device__ __forceinline__ float toF32<__half>(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T fromF32(float x);
template <> __device__ __forceinline__ float fromF32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 fromF32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half fromF32<__half>(float x) { return __float2half_rn(x); }

/// Elements per 16-byte vector.
template <typename T> constexpr int kVec = 16 / sizeof(T);

/// Loads `rows x cols` elements of a row-strided global matrix (row r at src + r * row_stride,
/// cols contiguous, cols % kVec<T> == 0, 16-byte aligned rows) into fp32 shared memory with leading
/// dimension `lds`. Rows >= rows_valid are zero-filled. Whole block cooperates.
template <typename T>
__device__ __forceinline__ void loadRowsToShared(float* __restrict__ dst, int lds,
                                                 const T* __restrict__ src, int64_t row_stride,
                                                 int rows, int rows_valid, int cols) {
  constexpr int V = kVec<T>;
  const int vecs_per_row = cols / V;
  const int total = rows * vecs_per_row;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int r = i / vecs_per_row;
    const int c = (i - r * vecs_per_row) * V;
    float* d = dst + r * lds + c;
    if (r < rows_valid) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(src + r * row_stride + c));
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < V; ++j) d[j] = toF32<T>(e[j]);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) d[j] = 0.f;
    }
  }
}

/// Register-staged chunk load with a compile-time trip count: fetch() issues every 16-byte global
/// load of a [ROWS x COLS] slice at once (so they overlap each other and the caller's compute),
/// commit() converts to fp32 and stores to shared memory (rows >= rows_valid become zeros).
/// Used for software pipelining: fetch chunk i+1, compute chunk i, commit. Whole block calls.
template <typename T, int ROWS, int COLS, int NTHREADS>
struct ChunkFetcher {
  static constexpr int V = kVec<T>;
  static constexpr int VPR = COLS / V;  // vectors per row
  static constexpr int TOTAL = ROWS * VPR;
  static constexpr int ITERS = (TOTAL + NTHREADS - 1) / NTHREADS;
  static_assert(COLS % V == 0, "row length must be a multiple of the 16-byte vector");
  uint4 regs[ITERS];

  __device__ __forceinline__ void fetch(const T* __restrict__ src, int64_t row_stride, int rows_valid) {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int i = threadIdx.x + it * NTHREADS;
      const int r = i / VPR, c = (i - r * VPR) * V;
      regs[it] = make_uint4(0u, 0u, 0u, 0u);
      if (i < TOTAL && r < rows_valid)
        regs[it] = __ldg(reinterpret_cast<const uint4*>(src + r * row_stride + c));
    }
  }
  __device__ __forceinline__ void commit(float* __restrict__ dst, int lds) const {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int i = threadIdx.x + it * NTHREADS;
      if (i >= TOTAL) break;
      const int r = i / VPR, c = (i - r * VPR) * V;
      const T* e = reinterpret_cast<const T*>(&regs[it]);
      float* d = dst + r * lds + c;
      if constexpr (V == 4) {
        *reinterpret_cast<float4*>(d) = make_float4(toF32<T>(e[0]), toF32<T>(e[1]), toF32<T>(e[2]), toF32<T>(e[3]));
      } else {
#pragma unroll
        for (int j = 0; j < V; j += 4)
          *reinterpret_cast<float4*>(d + j) =
              make_float4(toF32<T>(e[j]), toF32<T>(e[j + 1]), toF32<T>(e[j + 2]), toF32<T>(e[j + 3]));
      }
    }
  }
};

// ---- tensor-core fragments (mma.sync.m16n8k8 tf32, fp32 accumulate) -----------------------------
// Lane l: group g = l / 4, thread-in-group q = l % 4.
//   A (16x8, row-major): a0 (g, q)  a1 (g+8, q)  a2 (g, q+4)  a3 (g+8, q+4)
//   B (8x8,  k x n):     b0 (k=q, n=g)  b1 (k=q+4, n=g)
//   C (16x8):            c0 (g, 2q)  c1 (g, 2q+1)  c2 (g+8, 2q)  c3 (g+8, 2q+1)
struct Lane {
  int g, q;
  __device__ __forceinline__ Lane() : g((threadIdx.x & 31) >> 2), q(threadIdx.x & 3) {}
};

__device__ __forceinline__ uint32_t tf32Bits(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mmaTf32(float (&c)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// An operand fragment in tf32, with the low part when Precise (3xTF32).
template <int N, bool Precise> struct Frag {
  uint32_t hi[N];
  uint32_t lo[Precise ? N : 1];
  __device__ __forceinline__ void set(int i, float x) {
    hi[i] = tf32Bits(x);
    if constexpr (Precise) lo[i] = tf32Bits(x - __uint_as_float(hi[i]));
  }
};

template <bool Precise>
__device__ __forceinline__ void mma(float (&c)[4], const Frag<4, Precise>& a,
                                    const Frag<2, Precise>& b) {
  if constexpr (Precise) {
    const uint32_t alo[4] = {a.lo[0], a.lo[1], a.lo[2], a.lo[3]};
    const uint32_t blo[2] = {b.lo[0], b.lo[1]};
    mmaTf32(c, alo, b.hi);
    mmaTf32(c, a.hi, blo);
  }
  mmaTf32(c, a.hi, b.hi);
}

/// acc[NT] (a 16 x 8*NT tile at rows m0.., cols n0..) += sum_{k < kdim} A(m, k) * B(k, n).
/// A(m, k) and B(k, n) are functors returning fp32 (they may read shared memory and scale on the
/// fly). kdim % 8 == 0. One warp; all lanes must call.
/// Staged: each k-step's products go to a zeroed fragment that one fp32 add (round to nearest)
/// puts into acc. The tensor cores' fp32 accumulation truncates (rounds toward zero): fed the
/// running sum over a long k it biases the sum (~1e-5 relative at k = 256); staged, each
/// truncation acts at the scale of 8 products.
template <int NT, bool Precise, bool Staged = false, typename FA, typename FB>
__device__ __forceinline__ void warpTileProduct(float (&acc)[NT][4], int m0, int n0, int kdim,
                                                FA&& fa, FB&& fb) {
  const Lane ln;
  for (int k0 = 0; k0 < kdim; k0 += 8) {
    Frag<4, Precise> a;
    a.set(0, fa(m0 + ln.g, k0 + ln.q));
    a.set(1, fa(m0 + ln.g + 8, k0 + ln.q));
    a.set(2, fa(m0 + ln.g, k0 + ln.q + 4));
    a.set(3, fa(m0 + ln.g + 8, k0 + ln.q + 4));
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      Frag<2, Precise> b;
      b.set(0, fb(k0 + ln.q, n0 + 8 * j + ln.g));
      b.set(1, fb(k0 + ln.q + 4, n0 + 8 * j + ln.g));
      if constexpr (Staged) {
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        mma<Precise>(d, a, b);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] += d[e];
      } else {
        mma<Precise>(acc[j], a, b);
      }
    }
  }
}

/// Visits the accumulator tile's elements: f(row, col, value&).
template <int NT, typename F>
__device__ __forceinline__ void forEachAcc(float (&acc)[NT][4], int m0, int n0, F&& f) {
  const Lane ln;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + ln.g + ((e & 2) ? 8 : 0);
      const int c = n0 + 8 * j + 2 * ln.q + (e & 1);
      f(r, c, acc[j][e]);
    }
  }
}

template <int NT>
__device__ __forceinline__ void zeroAcc(float (&acc)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
}

/// Stores a 16 x 8*NT accumulator tile to a row-major global matrix of T (row stride `ld`),
/// multiplying by `scale`, rows >= rows_valid skipped. Adjacent column pairs are written together.
template <typename T, int NT>
__device__ __forceinline__ void storeAcc(T* __restrict__ dst, int64_t ld, float (&acc)[NT][4],
                                         int m0, int n0, int rows_valid, float scale) {
  const Lane ln;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = m0 + ln.g + 8 * h;
      const int c = n0 + 8 * j + 2 * ln.q;
      if (r >= rows_valid) continue;
      T* p = dst + r * ld + c;
      if constexpr (sizeof(T) == 2) {
        T pair[2] = {fromF32<T>(acc[j][2 * h] * scale), fromF32<T>(acc[j][2 * h + 1] * scale)};
        *reinterpret_cast<uint32_t*>(p) = *reinterpret_cast<const uint32_t*>(pair);
      } else {
        *reinterpret_cast<float2*>(p) = make_float2(acc[j][2 * h] * scale, acc[j][2 * h + 1] * scale);
      }
    }
  }
}

}  // namespace linac::kernels::cuda::tile
