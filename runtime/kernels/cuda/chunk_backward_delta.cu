// Tensor-core chunkwise backward for the DELTA update rule with inclusive readout and a decay of
// class None (DeltaNet), Scalar (Gated DeltaNet) or Fixed (run as Scalar with g[h] at every token;
// d_g[h] sums the per-token dg in double: the exact per-token kernel's fp32 sweep missed the fp32
// gate on heads with g ~ 0), following fla's chunk_gated_delta_rule backward (WY representation).
// Other kinds use chunk_backward_additive.cu or the exact kernel of chunk_backward.cu.
//
// Semantics (recurrence.h), per sequence n and head h:
//   S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T,   o_t = scale * S_t^T q_t.
// Chunks of C = 64 tokens; inside a chunk (t, s = 0..C-1; padded tokens past the sequence end have
// q = k = v = d_o = 0, g = 0, beta = 0), b_t = sum_{s <= t} g_s (inclusive, fp32), b_C = b_{C-1},
// Gam_ts = exp(b_t - b_s) (s <= t, exponent <= 0), S_c = state before the chunk:
//   G   = strict_tril(K K^T . Gam),  L = diag(beta) G,  X = (I + L)^-1,  Tm = X diag(beta)
//   W   = Tm (K . exp(b)),  U = Tm V,  D = U - W S_c            (D = fla's v_new)
//   A   = tril(Q K^T . Gam),  o = scale ((Q . exp(b)) S_c + A D)
//   S_{c+1} = exp(b_C) S_c + Kd^T D,  Kd = K . exp(b_C - b)
// Backward, dS_{c+1} = gradient w.r.t. the state after the chunk (d_ht after the last one):
//   dD   = scale A^T dO + Kd dS_{c+1}
//   dS_c = exp(b_C) dS_{c+1} + scale (Q . exp(b))^T dO - W^T dD
//   dq   = scale exp(b) . (dO S_c^T) + dA' K,       dA' = scale (dO D^T) . Gam (lower, incl.)
//   dk   = Kd-part exp(b_C - b) . (D dS_{c+1}^T) + dA'^T Q + exp(b) . (Tm^T dW) + dM K + dM^T K
//   dW   = -dD S_c^T,  dU = dD,  dv = Tm^T dD
//   dTm  = dW (K . exp(b))^T + dD V^T (lower, incl.),  dbeta_s = sum_t dTm_ts X_ts + sum_s' dL_s s' G_s s'
//   dL   = -X^T (dTm Tm^T) (strict lower)  [= -X^T dX X^T with dX = dTm diag(beta)]
//   dM   = dL . beta_t Gam  (the gradient of K K^T through L)
//   dg   : db_t (derivative w.r.t. the cumulative b_t) collects
//            q_t.dq_t - k_t.(dk_Kd + dk_intra)_t        (Q exp(b), Gam in A, exp(-b) in Kd)
//            + k_t.(exp(b) Tm^T dW)_t                   (exp(b) in W)
//            + sum_s E_ts - sum_t' E_t't,  E = dL . L   (Gam in L)
//          plus the chunk term Z = exp(b_C) <S_c, dS_{c+1}> + sum_s k_s.(dk_Kd)_s on b_C; then
//          dg_t = Z + sum_{t' >= t} db_t' (reverse cumsum inside the chunk: b_t = sum_{s<=t} g_s).
//          As computed: dA'_tt (q_t.k_t), in both q_t.dq_t and k_t.dk_intra_t, is left out of db
//          (it cancels exactly), and kd_t = k_t.(dk_Kd)_t is kept apart from db and Z (kdpart):
//          dg_t = exp(b_C) <S_c, dS_{c+1}> + sum_{t' >= t} db_t' + sum_{s < t} kd_s.
// Passes (one CTA per item, 8 warps, warp tiles 16 x 32 of mma.sync m16n8k8 tf32):
//   1 prepKernel    (chunk, head): G, A by key slices of 64; X by forward substitution (64
//                   threads, one column each, as chunk_forward.cuh); writes X, W, U and
//                   dD_local = scale A^T dO to the workspace.
//   2 fwdScanKernel (value block 64, head, sequence): S_c for every chunk (workspace), D = U - W S_c
//                   (overwrites U), S_{c+1}.
//   3 bwdScanKernel (value block 64, head, sequence): dD = dD_local + Kd dS_{c+1} (overwrites
//                   dD_local), dS_{c+1} for every chunk (workspace), dS_c; d_h0.
//   4 dqdkKernel    (chunk, head, key slice 64), loop over value blocks: dq (final), dk partial
//                   (Kd + intra parts, workspace), dW (overwrites W), db, kd and Z partials.
//   5 wyBwdKernel   (chunk, head): dTm, dv (final), dL, dM, dk (final), dbeta, dg (final).
// Numerics: products on tensor cores (3xTF32, ~fp32 products); for fp32 inputs each k-step of 8
// accumulated in a zeroed fragment and added to the tile with one fp32 add (tile.cuh's staged
// warpTileProduct: the tensor cores' fp32 accumulation truncates, and fed a running sum over
// k = 256 it biased dk and dbeta by up to ~2e-5 relative; 16-bit inputs, gated at 5e-3, keep the
// running sum); states, W, U, D, dD, X in fp32 workspaces; X by fp32 forward substitution. The
// in-chunk cumsum b and its differences are double (chunkCumsum; with gates clamped at -20 an fp32
// b_t - b_s failed dv, dg and dbeta at ~1.05e-5), exp in fp32; dg's in-chunk reverse cumsum is
// double. With strong decays dg_t is ~1000x smaller than the terms of db: dA'_tt (q_t.k_t) (in
// q.dq and in k.dk alike) and the Kd rows kd_t (in db and in Z alike) cancelled only after their
// fp32 row sums, so the row sums leave both out (the dg paragraph above) and the kd rows cancel
// in the double sum. A float32 emulation of these kernels
// (tests/runtime/cuda/delta_bwd_f32_check.py) reproduces the lab's and verify's strong-gate
// failures (dg up to 5e-5, dbeta up to 2.2e-5 over 40 draws) and predicts <= 1.9e-6 for every
// gradient with these changes. 1xTF32 operands (11-bit mantissa) could cost ~1e-3 relative
// error in dg and dbeta (sums of differences of large terms; the additive path's host emulation
// found 1.7e-3 for a tf32 dg); a 1xTF32 instantiation (Precise = false) is a candidate when
// neither is requested. Every exponent is <= 0, so strong
// gates underflow to 0, never overflow. Row reductions (db, kd, dbeta) use shared atomics
// (order-nondeterministic at the rounding level); every global output is written once.
// Workspace (cudaMallocAsync): X [slots, H, C, C], W/dW [rows, dk], U/D [rows, dv],
// dD [rows, dv], S and dS [slots, H, dk, dv], dk partial [rows, dk], db / kd / Z partials.
#include "chunk_backward_paths.h"
#include "chunk_slots.cuh"

#include "cuda_check.h"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

namespace linac::kernels::cuda {
namespace {

constexpr int kC = 64;        // chunk length (tokens)
constexpr int kSlice = 64;    // key slice / value block width
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kNT = 4;        // 8-column n-tiles per warp tile (16 x 32)
// Shared-memory leading dimensions (floats): an operand read as a direct A fragment (row m, col k)
// = X[m * ld + k] is conflict-free with ld = 4 mod 32, a direct B fragment (k, n) = X[k * ld + n]
// with ld = 8 mod 32; transposed reads swap the two.
constexpr int kLdA = kSlice + 4;  // 68
constexpr int kLdB = kSlice + 8;  // 72
static_assert(kC == kSlice && kC == 64, "the 8 warps tile a 64 x 64 output as 4 x 2 tiles of 16 x 32");

template <typename T>
struct DeltaBwdParams {
  const T* q;              // [B, T, H, DK]
  const T* k;              // [B, T, H, DK]
  const T* v;              // [B, T, H, dv]
  const T* d_o;            // [B, T, H, dv]
  const float* g;          // None: null; Scalar [B, T, H]
  const float* beta;       // [B, T, H]
  const float* h0;         // [N, H, DK, dv] or null
  const float* d_ht;       // [N, H, DK, dv] or null
  float* X;                // [slots, H, C, C]  (I + L)^-1 per chunk
  float* W;                // [rows, DK]  W (pass 1), then dW (pass 4)
  float* UD;               // [rows, dv]  U (pass 1), then D (pass 2)
  float* dD;               // [rows, dv]  scale A^T dO (pass 1), then dD (pass 3)
  float* states;           // [slots, H, DK, dv] S_c
  float* dstates;          // [slots, H, DK, dv] dS_{c+1}
  float* dkpart;           // [rows, DK]  dk from Kd and the intra-chunk term (pass 4)
  float* dbpart;           // [DK / kSlice, rows] db partials per key slice, or null
  float* kdpart;           // [DK / kSlice, rows] k_t . dk_Kd_t partials per key slice, or null
  float* zpart;            // [DK / kSlice, slots * H] chunk terms Z per key slice, or null
  T* dq;                   // [B, T, H, DK] or null
  T* dk;                   // [B, T, H, DK] or null
  T* dv;                   // [B, T, H, dv] or null
  float* dg;               // [B, T, H] or null
  float* dbeta;            // [B, T, H] or null
  float* dh0;              // [N, H, DK, dv] or null
  const int64_t* cu_seqlens;  // [N + 1] device, or null
  int64_t seq_len;         // T
  int64_t chunks_per_seq;  // ceil(T / C) without cu_seqlens
  int64_t rows;            // B * T * H
  int64_t slots;           // chunk slots
  int num_seqs;            // N
  int heads;               // H
  int value_dim;           // dv
  float scale;
  int decay;               // DecayClass (None or Scalar)
};

/// Loads the chunk's per-token scalars (warp 0 cumsums the log-decays, in double; threads t < C
/// read beta): sB[t] = b_t (double: with gates clamped at -20, b reaches -1280 in a chunk, where an
/// fp32 b_t - b_s would carry ~1e-4 absolute error into exp), sEb[t] = exp(b_t), sEc[t] =
/// exp(b_C - b_t), sBeta[t] (any may be null). The caller synchronizes before use.
template <bool Precise, typename P>
__device__ __forceinline__ void loadChunkScalars(const P& p, int64_t tok0, int lc, int h, double* sB,
                                                 float* sEb, float* sEc, float* sBeta) {
  const int tid = threadIdx.x, lane = tid & 31;
  if (sBeta && tid < kC) sBeta[tid] = tid < lc ? p.beta[(tok0 + tid) * p.heads + h] : 0.f;
  if ((tid >> 5) != 0) return;
  const bool sc = p.decay == int(DecayClass::Scalar);
  const float g0 = (sc && lane < lc) ? p.g[(tok0 + lane) * p.heads + h] : 0.f;
  const float g1 = (sc && lane + 32 < lc) ? p.g[(tok0 + lane + 32) * p.heads + h] : 0.f;
  double b0, b1, blast;
  chunkCumsum(g0, g1, b0, b1, blast);
  if (sB) { sB[lane] = b0; sB[lane + 32] = b1; }
  if (sEb) { sEb[lane] = fastExp<Precise>(float(b0)); sEb[lane + 32] = fastExp<Precise>(float(b1)); }
  if (sEc) {
    sEc[lane] = fastExp<Precise>(float(blast - b0));
    sEc[lane + 32] = fastExp<Precise>(float(blast - b1));
  }
}

/// exp(b_t - b_s) from the chunk's double cumsum (the difference is taken before rounding).
template <bool Precise>
__device__ __forceinline__ float decayRatio(const double* sB, int t, int s) {
  return fastExp<Precise>(float(sB[t] - sB[s]));
}

/// Whether the products stage their sums (tile::warpTileProduct's Staged): for fp32 inputs, whose
/// gate (1e-5) the tensor cores' truncating accumulation crossed (dbeta of verify's dk 256 case at
/// 1.05e-5); 16-bit inputs (gate 5e-3) keep the running sum.
template <typename T>
inline constexpr bool kStagedSums = std::is_same_v<T, float>;

/// Starts asynchronous copies of `rows x cols` fp32 elements (global row stride `stride`, 16-byte
/// aligned rows, cols % 4 == 0) into shared memory (leading dimension ld, a multiple of 4); rows >=
/// valid are zero-filled with plain stores. Complete with asyncWaitAll() then __syncthreads().
__device__ __forceinline__ void asyncRowsF32(float* dst, int ld, const float* src, int64_t stride,
                                             int rows, int valid, int cols) {
  const int vpr = cols / 4;
  for (int i = threadIdx.x; i < rows * vpr; i += kThreads) {
    const int r = i / vpr, c = (i - r * vpr) * 4;
    float* d = dst + r * ld + c;
    if (r < valid) {
      const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(d));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src + r * stride + c)
                   : "memory");
    } else {
      *reinterpret_cast<float4*>(d) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

/// Per-row sums over a warp's 16 x 32 accumulator tile of x * wt(r, c), added to sRow[r] with
/// shared atomics (two warps share each row).
template <typename F>
__device__ __forceinline__ void rowSumsAtomic(float (&acc)[kNT][4], int m0, int n0, float* sRow,
                                              F&& wt) {
  float r0 = 0.f, r1 = 0.f;
  tile::forEachAcc(acc, m0, n0, [&](int r, int c, float& x) {
    const float y = x * wt(r, c);
    if (r - m0 < 8) r0 += y;
    else r1 += y;
  });
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    r0 += __shfl_xor_sync(0xffffffffu, r0, off);
    r1 += __shfl_xor_sync(0xffffffffu, r1, off);
  }
  const tile::Lane ln;
  if (ln.q == 0) {
    atomicAdd(sRow + m0 + ln.g, r0);
    atomicAdd(sRow + m0 + ln.g + 8, r1);
  }
}

// ---- pass 1: X, W, U, dD_local per (chunk, head) -------------------------------------------------
struct PrepSmem {
  static constexpr int P0 = 0;                 // [C, kLdB] Q slice (ld kLdA) / K slice / V block
  static constexpr int P1 = P0 + kC * kLdB;    // [C, kLdB] K slice (ld kLdA) / dO block
  static constexpr int LT = P1 + kC * kLdB;    // [C, kLdA] L transposed: LT[s][t] = L[t][s]
  static constexpr int At = LT + kC * kLdA;    // [C, kLdA] A'^T: At[s][t] = scale A[t][s]
  static constexpr int Xm = At + kC * kLdA;    // [C, kLdA] X
  static constexpr int Bc = Xm + kC * kLdA;    // [C] b (doubles)
  static constexpr int Eb = Bc + 2 * kC;       // [C] exp(b)
  static constexpr int Beta = Eb + kC;         // [C] beta
  static constexpr int total = Beta + kC;
  static constexpr size_t bytes = size_t(total) * sizeof(float);
};

template <typename T, int DK, bool Precise>
__global__ void __launch_bounds__(kThreads, 2) prepKernel(const DeltaBwdParams<T> p) {
  using namespace tile;
  using L = PrepSmem;
  extern __shared__ __align__(16) float smem[];
  float* sP0 = smem + L::P0;
  float* sP1 = smem + L::P1;
  float* sLT = smem + L::LT;
  float* sAt = smem + L::At;
  float* sX = smem + L::Xm;
  double* sB = reinterpret_cast<double*>(smem + L::Bc);
  float* sEb = smem + L::Eb;
  float* sBeta = smem + L::Beta;

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<kC>(p, blockIdx.x, n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, warp = tid >> 5;
  const int h = blockIdx.y, H = p.heads, dv = p.value_dim;
  const int64_t tok0 = bos + chunk * kC;
  const int lc = int((len - chunk * kC) < kC ? (len - chunk * kC) : int64_t(kC));
  const int mt = warp >> 1, n0 = 32 * (warp & 1), m0 = 16 * mt;
  const bool upper = n0 > m0 + 15;  // the warp's tile lies strictly above the diagonal

  loadChunkScalars<Precise>(p, tok0, lc, h, sB, sEb, nullptr, sBeta);

  // G = K K^T and Q K^T (full dk) by key slices.
  float ag[kNT][4], aa[kNT][4];
  zeroAcc(ag);
  zeroAcc(aa);
  for (int c0 = 0; c0 < DK; c0 += kSlice) {
    __syncthreads();
    loadRowsToShared<T>(sP0, kLdA, p.q + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    loadRowsToShared<T>(sP1, kLdA, p.k + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    __syncthreads();
    if (!upper) {
      warpTileProduct<kNT, Precise, kStagedSums<T>>(ag, m0, n0, kSlice, [&](int t, int c) { return sP1[t * kLdA + c]; },
                                    [&](int c, int s) { return sP1[s * kLdA + c]; });
      warpTileProduct<kNT, Precise, kStagedSums<T>>(aa, m0, n0, kSlice, [&](int t, int c) { return sP0[t * kLdA + c]; },
                                    [&](int c, int s) { return sP1[s * kLdA + c]; });
    }
  }
  forEachAcc(ag, m0, n0, [&](int t, int s, float& x) {
    sLT[s * kLdA + t] = s < t ? sBeta[t] * x * decayRatio<Precise>(sB, t, s) : 0.f;
  });
  forEachAcc(aa, m0, n0, [&](int t, int s, float& x) {
    sAt[s * kLdA + t] = s <= t ? p.scale * x * decayRatio<Precise>(sB, t, s) : 0.f;
  });
  __syncthreads();

  // X = (I + L)^-1, one column per thread (forward substitution, as chunk_forward.cuh).
  if (tid < kC) {
    const int s = tid;
    float x[kC];
#pragma unroll
    for (int i = 0; i < kC; ++i) x[i] = (i == s) ? 1.f : 0.f;
#pragma unroll
    for (int j = 0; j < kC - 1; ++j) {
      const float xj = x[j];
      const float* lt = sLT + j * kLdA;  // lt[i] = L[i][j], zero for i <= j
#pragma unroll
      for (int i4 = (j + 1) / 4; i4 < kC / 4; ++i4) {
        const float4 l4 = *reinterpret_cast<const float4*>(lt + 4 * i4);
        x[4 * i4 + 0] -= l4.x * xj;
        x[4 * i4 + 1] -= l4.y * xj;
        x[4 * i4 + 2] -= l4.z * xj;
        x[4 * i4 + 3] -= l4.w * xj;
      }
    }
    float* gX = p.X + (blockIdx.x * int64_t(H) + h) * (kC * kC);  // [C, C] row-major
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      sX[i * kLdA + s] = x[i];
      gX[i * kC + s] = x[i];
    }
  }

  // W = Tm (K . exp(b)) by key slices; Tm[t][s] = X[t][s] beta_s is zero for s > t.
  for (int c0 = 0; c0 < DK; c0 += kSlice) {
    __syncthreads();
    loadRowsToShared<T>(sP0, kLdB, p.k + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    __syncthreads();
    float acc[kNT][4];
    zeroAcc(acc);
    warpTileProduct<kNT, Precise, kStagedSums<T>>(
        acc, m0, n0, m0 + 16, [&](int t, int s) { return sX[t * kLdA + s] * sBeta[s]; },
        [&](int s, int c) { return sP0[s * kLdB + c] * sEb[s]; });
    storeAcc<float, kNT>(p.W + (tok0 * H + h) * DK + c0, int64_t(H) * DK, acc, m0, n0, lc, 1.f);
  }
  // U = Tm V and dD_local = A'^T dO by value blocks.
  const int t0 = m0;
  for (int v0 = 0; v0 < dv; v0 += kSlice) {
    __syncthreads();
    loadRowsToShared<T>(sP0, kLdB, p.v + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    loadRowsToShared<T>(sP1, kLdB, p.d_o + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    __syncthreads();
    float acc[kNT][4];
    zeroAcc(acc);
    warpTileProduct<kNT, Precise, kStagedSums<T>>(
        acc, m0, n0, m0 + 16, [&](int t, int s) { return sX[t * kLdA + s] * sBeta[s]; },
        [&](int s, int j) { return sP0[s * kLdB + j]; });
    storeAcc<float, kNT>(p.UD + (tok0 * H + h) * dv + v0, int64_t(H) * dv, acc, m0, n0, lc, 1.f);
    zeroAcc(acc);
    // rows s >= m0 need t >= s: k runs over t = t0 + kk
    warpTileProduct<kNT, Precise, kStagedSums<T>>(
        acc, m0, n0, kC - t0, [&](int s, int kk) { return sAt[s * kLdA + t0 + kk]; },
        [&](int kk, int j) { return sP1[(t0 + kk) * kLdB + j]; });
    storeAcc<float, kNT>(p.dD + (tok0 * H + h) * dv + v0, int64_t(H) * dv, acc, m0, n0, lc, 1.f);
  }
}

// ---- passes 2-3: state scans per (value block, head, sequence) -----------------------------------
template <int DK>
struct ScanSmem {
  static constexpr int LDX = DK + 8;      // [C, DK] buffer, read with ld DK + 4 or DK + 8
  static constexpr int X = 0;
  static constexpr int S = X + kC * LDX;  // [DK, kLdB] state (gradient) block
  static constexpr int Y = S + DK * kLdB; // [C, kLdB] U / D (fwd) or dD (bwd)
  static constexpr int Z = Y + kC * kLdB; // [C, kLdB] dO (bwd)
  static constexpr int Ec = Z + kC * kLdB;  // [C] exp(b_C - b)
  static constexpr int Eb = Ec + kC;        // [C] exp(b)
  static constexpr int total = Eb + kC;
  static constexpr size_t bytes = size_t(total) * sizeof(float);
};

template <typename T, int DK, bool Precise>
__global__ void __launch_bounds__(kThreads, 1) fwdScanKernel(const DeltaBwdParams<T> p) {
  using namespace tile;
  using L = ScanSmem<DK>;
  extern __shared__ __align__(16) float smem[];
  float* sX = smem + L::X;
  float* sS = smem + L::S;
  float* sY = smem + L::Y;
  float* sEc = smem + L::Ec;
  float* sEb = smem + L::Eb;
  constexpr int LDW = DK + 4, LDK = DK + 8;

  const int tid = threadIdx.x, warp = tid >> 5;
  const int v0 = blockIdx.x * kSlice, h = blockIdx.y, n = blockIdx.z;
  const int H = p.heads, dv = p.value_dim;
  int64_t bos, len, coff;
  seqInfo<kC>(p, n, bos, len, coff);
  const int64_t hbase = (int64_t(n) * H + h) * DK * dv + v0;
  for (int i = tid; i < DK * kSlice; i += kThreads) {
    const int c = i / kSlice, j = i - c * kSlice;
    sS[c * kLdB + j] = p.h0 ? p.h0[hbase + int64_t(c) * dv + j] : 0.f;
  }
  const int mt = warp >> 1, n0 = 32 * (warp & 1), m0 = 16 * mt;
  const int64_t nch = (len + kC - 1) / kC;
  for (int64_t ch = 0; ch < nch; ++ch) {
    const int64_t tok0 = bos + ch * kC;
    const int lc = int((len - ch * kC) < kC ? (len - ch * kC) : int64_t(kC));
    __syncthreads();  // previous state update done; sX, sY free
    asyncRowsF32(sX, LDW, p.W + (tok0 * H + h) * DK, int64_t(H) * DK, kC, lc, DK);
    asyncRowsF32(sY, kLdB, p.UD + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    loadChunkScalars<Precise>(p, tok0, lc, h, nullptr, sEb, sEc, nullptr);
    {  // states[c] = S_c
      float* dst = p.states + ((coff + ch) * H + h) * int64_t(DK) * dv + v0;
      for (int e = tid; e < DK * (kSlice / 4); e += kThreads) {
        const int c = e / (kSlice / 4), j = (e - c * (kSlice / 4)) * 4;
        *reinterpret_cast<float4*>(dst + int64_t(c) * dv + j) =
            *reinterpret_cast<const float4*>(sS + c * kLdB + j);
      }
    }
    asyncWaitAll();
    __syncthreads();
    {  // D = U - W S_c (each warp updates its own tile of sY in place)
      float acc[kNT][4];
      forEachAcc(acc, m0, n0, [&](int t, int j, float& x) { x = sY[t * kLdB + j]; });
      warpTileProduct<kNT, Precise, kStagedSums<T>>(acc, m0, n0, DK, [&](int t, int c) { return -sX[t * LDW + c]; },
                                    [&](int c, int j) { return sS[c * kLdB + j]; });
      forEachAcc(acc, m0, n0, [&](int t, int j, float& x) { sY[t * kLdB + j] = x; });
      storeAcc<float, kNT>(p.UD + (tok0 * H + h) * dv + v0, int64_t(H) * dv, acc, m0, n0, lc, 1.f);
    }
    __syncthreads();  // sX (W) free, sY (D) complete
    loadRowsToShared<T>(sX, LDK, p.k + (tok0 * H + h) * DK, int64_t(H) * DK, kC, lc, DK);
    __syncthreads();
    // S = exp(b_C) S + (K . exp(b_C - b))^T D, exp(b_C) = exp(b_{C-1}) (padded tokens have g = 0)
    const float ebc = sEb[kC - 1];
    for (int item = warp; item < (DK / 16) * 2; item += kWarps) {
      const int mi = 16 * (item >> 1), ni = 32 * (item & 1);
      float acc[kNT][4];
      forEachAcc(acc, mi, ni, [&](int c, int j, float& x) { x = sS[c * kLdB + j] * ebc; });
      warpTileProduct<kNT, Precise, kStagedSums<T>>(acc, mi, ni, kC,
                                    [&](int c, int t) { return sX[t * LDK + c] * sEc[t]; },
                                    [&](int t, int j) { return sY[t * kLdB + j]; });
      forEachAcc(acc, mi, ni, [&](int c, int j, float& x) { sS[c * kLdB + j] = x; });
    }
  }
}

template <typename T, int DK, bool Precise>
__global__ void __launch_bounds__(kThreads, 1) bwdScanKernel(const DeltaBwdParams<T> p) {
  using namespace tile;
  using L = ScanSmem<DK>;
  extern __shared__ __align__(16) float smem[];
  float* sX = smem + L::X;
  float* sS = smem + L::S;   // dS
  float* sY = smem + L::Y;   // dD
  float* sO = smem + L::Z;   // dO
  float* sEc = smem + L::Ec;
  float* sEb = smem + L::Eb;
  constexpr int LDA = DK + 4, LDT = DK + 8;

  const int tid = threadIdx.x, warp = tid >> 5;
  const int v0 = blockIdx.x * kSlice, h = blockIdx.y, n = blockIdx.z;
  const int H = p.heads, dv = p.value_dim;
  int64_t bos, len, coff;
  seqInfo<kC>(p, n, bos, len, coff);
  const int64_t hbase = (int64_t(n) * H + h) * DK * dv + v0;
  for (int i = tid; i < DK * kSlice; i += kThreads) {
    const int c = i / kSlice, j = i - c * kSlice;
    sS[c * kLdB + j] = p.d_ht ? p.d_ht[hbase + int64_t(c) * dv + j] : 0.f;
  }
  const int mt = warp >> 1, n0 = 32 * (warp & 1), m0 = 16 * mt;
  const int64_t nch = (len + kC - 1) / kC;
  for (int64_t ch = nch - 1; ch >= 0; --ch) {
    const int64_t tok0 = bos + ch * kC;
    const int lc = int((len - ch * kC) < kC ? (len - ch * kC) : int64_t(kC));
    __syncthreads();  // previous update of sS done; buffers free
    asyncRowsF32(sY, kLdB, p.dD + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    loadRowsToShared<T>(sX, LDA, p.k + (tok0 * H + h) * DK, int64_t(H) * DK, kC, lc, DK);
    loadRowsToShared<T>(sO, kLdB, p.d_o + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    loadChunkScalars<Precise>(p, tok0, lc, h, nullptr, sEb, sEc, nullptr);
    {  // dstates[c] = dS_{c+1}
      float* dst = p.dstates + ((coff + ch) * H + h) * int64_t(DK) * dv + v0;
      for (int e = tid; e < DK * (kSlice / 4); e += kThreads) {
        const int c = e / (kSlice / 4), j = (e - c * (kSlice / 4)) * 4;
        *reinterpret_cast<float4*>(dst + int64_t(c) * dv + j) =
            *reinterpret_cast<const float4*>(sS + c * kLdB + j);
      }
    }
    asyncWaitAll();
    __syncthreads();
    {  // dD = dD_local + (K . exp(b_C - b)) dS_{c+1} (own tile of sY, in place)
      float acc[kNT][4];
      forEachAcc(acc, m0, n0, [&](int t, int j, float& x) { x = sY[t * kLdB + j]; });
      warpTileProduct<kNT, Precise, kStagedSums<T>>(acc, m0, n0, DK,
                                    [&](int t, int c) { return sX[t * LDA + c] * sEc[t]; },
                                    [&](int c, int j) { return sS[c * kLdB + j]; });
      forEachAcc(acc, m0, n0, [&](int t, int j, float& x) { sY[t * kLdB + j] = x; });
      storeAcc<float, kNT>(p.dD + (tok0 * H + h) * dv + v0, int64_t(H) * dv, acc, m0, n0, lc, 1.f);
    }
    __syncthreads();  // every read of sS and sX (K) done, sY (dD) complete
    asyncRowsF32(sX, LDT, p.W + (tok0 * H + h) * DK, int64_t(H) * DK, kC, lc, DK);
    asyncWaitAll();
    __syncthreads();
    const float ebc = sEb[kC - 1];
    // dS <- exp(b_C) dS - W^T dD (each item owns its tile of sS)
    for (int item = warp; item < (DK / 16) * 2; item += kWarps) {
      const int mi = 16 * (item >> 1), ni = 32 * (item & 1);
      float acc[kNT][4];
      forEachAcc(acc, mi, ni, [&](int c, int j, float& x) { x = sS[c * kLdB + j] * ebc; });
      warpTileProduct<kNT, Precise, kStagedSums<T>>(acc, mi, ni, kC, [&](int c, int t) { return -sX[t * LDT + c]; },
                                    [&](int t, int j) { return sY[t * kLdB + j]; });
      forEachAcc(acc, mi, ni, [&](int c, int j, float& x) { sS[c * kLdB + j] = x; });
    }
    __syncthreads();  // W reads done
    loadRowsToShared<T>(sX, LDT, p.q + (tok0 * H + h) * DK, int64_t(H) * DK, kC, lc, DK);
    __syncthreads();
    // dS += scale (Q . exp(b))^T dO
    const float scale = p.scale;
    for (int item = warp; item < (DK / 16) * 2; item += kWarps) {
      const int mi = 16 * (item >> 1), ni = 32 * (item & 1);
      float acc[kNT][4];
      forEachAcc(acc, mi, ni, [&](int c, int j, float& x) { x = sS[c * kLdB + j]; });
      warpTileProduct<kNT, Precise, kStagedSums<T>>(acc, mi, ni, kC,
                                    [&](int c, int t) { return sX[t * LDT + c] * (scale * sEb[t]); },
                                    [&](int t, int j) { return sO[t * kLdB + j]; });
      forEachAcc(acc, mi, ni, [&](int c, int j, float& x) { sS[c * kLdB + j] = x; });
    }
  }
  if (p.dh0) {
    __syncthreads();
    for (int i = tid; i < DK * kSlice; i += kThreads) {
      const int c = i / kSlice, j = i - c * kSlice;
      p.dh0[hbase + int64_t(c) * dv + j] = sS[c * kLdB + j];
    }
  }
}

// ---- pass 4: dq, dk partial, dW, db partials per (chunk, head, key slice) -----------------------
struct DqdkSmem {
  static constexpr int S = 0;                 // [64, kLdA] S_c slice rows (c), cols j / later Q (kLdB)
  static constexpr int dS = S + kC * kLdB;    // [64, kLdA] dS_{c+1} slice / later K (kLdB)
  static constexpr int dO = dS + kC * kLdB;   // [C, kLdA]
  static constexpr int D = dO + kC * kLdA;    // [C, kLdA]
  static constexpr int dD = D + kC * kLdA;    // [C, kLdA]
  static constexpr int dA = dD + kC * kLdA;   // [C, kLdA] dA' (lower incl.)
  static constexpr int Bc = dA + kC * kLdA;   // [C] b (doubles)
  static constexpr int Eb = Bc + 2 * kC;      // [C] exp(b)
  static constexpr int Ec = Eb + kC;          // [C] exp(b_C - b)
  static constexpr int Row = Ec + kC;         // [C] db partial rows
  static constexpr int Kd = Row + kC;         // [C] k . dk_Kd partial rows
  static constexpr int Dg = Kd + kC;          // [C] dA'_tt (the diagonal of dA')
  static constexpr int Red = Dg + kC;         // [kWarps]
  static constexpr int total = Red + kWarps;
  static constexpr size_t bytes = size_t(total) * sizeof(float);
};
static_assert(PrepSmem::Bc % 2 == 0 && DqdkSmem::Bc % 2 == 0, "the double cumsum must be 8-byte aligned");
static_assert(DqdkSmem::dS % 4 == 0 && DqdkSmem::D % 4 == 0 && DqdkSmem::dD % 4 == 0,
              "cp.async destinations must be 16-byte aligned");

template <typename T, int DK, bool Precise>
__global__ void __launch_bounds__(kThreads, 2) dqdkKernel(const DeltaBwdParams<T> p) {
  using namespace tile;
  using L = DqdkSmem;
  extern __shared__ __align__(16) float smem[];
  float* sS = smem + L::S;
  float* sdS = smem + L::dS;
  float* sdO = smem + L::dO;
  float* sD = smem + L::D;
  float* sdD = smem + L::dD;
  float* sdA = smem + L::dA;
  double* sB = reinterpret_cast<double*>(smem + L::Bc);
  float* sEb = smem + L::Eb;
  float* sEc = smem + L::Ec;
  float* sRow = smem + L::Row;
  float* sKd = smem + L::Kd;
  float* sDiag = smem + L::Dg;
  float* sRed = smem + L::Red;

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<kC>(p, blockIdx.x, n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int h = blockIdx.y, ks = blockIdx.z, c0 = ks * kSlice;
  const int H = p.heads, dv = p.value_dim;
  const int64_t tok0 = bos + chunk * kC;
  const int lc = int((len - chunk * kC) < kC ? (len - chunk * kC) : int64_t(kC));
  const int mt = warp >> 1, n0 = 32 * (warp & 1), m0 = 16 * mt;
  const bool upper = n0 > m0 + 15;
  const int64_t sbase = ((coff + chunk) * H + h) * int64_t(DK) * dv + int64_t(c0) * dv;
  const bool want_db = p.dbpart != nullptr;

  loadChunkScalars<Precise>(p, tok0, lc, h, sB, sEb, sEc, nullptr);
  if (tid < kC) {
    sRow[tid] = 0.f;
    sKd[tid] = 0.f;
  }

  float aq[kNT][4], ak[kNT][4], aw[kNT][4], ada[kNT][4];
  zeroAcc(aq);
  zeroAcc(ak);
  zeroAcc(aw);
  zeroAcc(ada);
  float zdot = 0.f;  // this thread's part of <S_c, dS_{c+1}> over the slice
  for (int v0 = 0; v0 < dv; v0 += kSlice) {
    __syncthreads();
    asyncRowsF32(sS, kLdA, p.states + sbase + v0, dv, kSlice, kSlice, kSlice);
    asyncRowsF32(sdS, kLdA, p.dstates + sbase + v0, dv, kSlice, kSlice, kSlice);
    asyncRowsF32(sD, kLdA, p.UD + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    asyncRowsF32(sdD, kLdA, p.dD + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    loadRowsToShared<T>(sdO, kLdA, p.d_o + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    asyncWaitAll();
    __syncthreads();
    // aq[t][c] += dO[t] . S[c];  ak[s][c] += D[s] . dS[c];  aw[t][c] += dD[t] . S[c];
    // ada[t][s] += dO[t] . D[s]
    warpTileProduct<kNT, Precise, kStagedSums<T>>(aq, m0, n0, kSlice, [&](int t, int j) { return sdO[t * kLdA + j]; },
                                  [&](int j, int c) { return sS[c * kLdA + j]; });
    warpTileProduct<kNT, Precise, kStagedSums<T>>(ak, m0, n0, kSlice, [&](int s, int j) { return sD[s * kLdA + j]; },
                                  [&](int j, int c) { return sdS[c * kLdA + j]; });
    warpTileProduct<kNT, Precise, kStagedSums<T>>(aw, m0, n0, kSlice, [&](int t, int j) { return sdD[t * kLdA + j]; },
                                  [&](int j, int c) { return sS[c * kLdA + j]; });
    if (!upper)
      warpTileProduct<kNT, Precise, kStagedSums<T>>(ada, m0, n0, kSlice,
                                    [&](int t, int j) { return sdO[t * kLdA + j]; },
                                    [&](int j, int s) { return sD[s * kLdA + j]; });
    if (want_db)
      for (int e = tid; e < kSlice * kSlice; e += kThreads) {
        const int c = e >> 6, j = e & 63;
        zdot += sS[c * kLdA + j] * sdS[c * kLdA + j];
      }
  }
  __syncthreads();  // slices free
  float* sQ = sS;   // [C, kLdB]
  float* sK = sdS;  // [C, kLdB]
  loadRowsToShared<T>(sQ, kLdB, p.q + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
  loadRowsToShared<T>(sK, kLdB, p.k + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
  const float scale = p.scale;
  // dA' = scale (dO D^T) . Gam: the strictly lower part in sdA, the diagonal in sDiag. The
  // diagonal's terms dA'_tt (q_t . k_t) enter q_t . dq_t and k_t . dk_t alike and cancel in db
  // exactly, so they are added to dq and dk only after db's row sums (with strong decays they are
  // ~1000x dg, and their fp32 rounding failed the fp32 dg gate).
  forEachAcc(ada, m0, n0, [&](int t, int s, float& x) {
    const float d = s <= t ? scale * x * decayRatio<Precise>(sB, t, s) : 0.f;
    if (s == t) sDiag[t] = d;
    sdA[t * kLdA + s] = s < t ? d : 0.f;
  });
  __syncthreads();

  // dq = scale exp(b) . aq + dA' K   (s < t < m0 + 16)
  forEachAcc(aq, m0, n0, [&](int t, int, float& x) { x *= scale * sEb[t]; });
  warpTileProduct<kNT, Precise, kStagedSums<T>>(aq, m0, n0, m0 + 16, [&](int t, int s) { return sdA[t * kLdA + s]; },
                                [&](int s, int c) { return sK[s * kLdB + c]; });
  // dk (Kd part) = exp(b_C - b) . ak; its rows k_s . dk_Kd_s go to db on their own (kdpart)
  forEachAcc(ak, m0, n0, [&](int s, int, float& x) { x *= sEc[s]; });
  if (want_db) rowSumsAtomic(ak, m0, n0, sKd, [&](int s, int c) { return sK[s * kLdB + c]; });
  // dk (intra part) = dA'^T Q  (t > s >= m0: k runs over t = m0 + kk), in its own accumulator
  float ai[kNT][4];
  zeroAcc(ai);
  warpTileProduct<kNT, Precise, kStagedSums<T>>(
      ai, m0, n0, kC - m0, [&](int s, int kk) { return sdA[(m0 + kk) * kLdA + s]; },
      [&](int kk, int c) { return sQ[(m0 + kk) * kLdB + c]; });
  if (want_db) {
    // db_t partial = q_t . dq_t - k_t . dk_intra_t (this key slice, dA' without its diagonal)
    rowSumsAtomic(aq, m0, n0, sRow, [&](int t, int c) { return sQ[t * kLdB + c]; });
    rowSumsAtomic(ai, m0, n0, sRow, [&](int t, int c) { return -sK[t * kLdB + c]; });
  }
  // dq_t += dA'_tt k_t; dk_t = Kd part + intra part + dA'_tt q_t
#pragma unroll
  for (int j = 0; j < kNT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) ak[j][e] += ai[j][e];
  forEachAcc(aq, m0, n0, [&](int t, int c, float& x) { x += sDiag[t] * sK[t * kLdB + c]; });
  forEachAcc(ak, m0, n0, [&](int s, int c, float& x) { x += sDiag[s] * sQ[s * kLdB + c]; });

  if (p.dq) storeAcc<T, kNT>(p.dq + (tok0 * H + h) * DK + c0, int64_t(H) * DK, aq, m0, n0, lc, 1.f);
  storeAcc<float, kNT>(p.dkpart + (tok0 * H + h) * DK + c0, int64_t(H) * DK, ak, m0, n0, lc, 1.f);
  storeAcc<float, kNT>(p.W + (tok0 * H + h) * DK + c0, int64_t(H) * DK, aw, m0, n0, lc, -1.f);

  if (want_db) {
    float z = zdot * sEb[kC - 1];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) z += __shfl_xor_sync(0xffffffffu, z, off);
    if (lane == 0) sRed[warp] = z;
    __syncthreads();
    if (tid < lc) {
      p.dbpart[ks * p.rows + (tok0 + tid) * H + h] = sRow[tid];
      p.kdpart[ks * p.rows + (tok0 + tid) * H + h] = sKd[tid];
    }
    if (tid == 0) {
      float a = 0.f;
      for (int w = 0; w < kWarps; ++w) a += sRed[w];
      p.zpart[ks * (p.slots * H) + int64_t(blockIdx.x) * H + h] = a;
    }
  }
}

// ---- pass 5: WY backward per (chunk, head) -------------------------------------------------------
struct WySmem {
  static constexpr int Xm = 0;                // [C, kLdB] X
  static constexpr int Tg = Xm + kC * kLdB;   // [C, kLdA] dTm (lower incl.), later dM
  static constexpr int Y = Tg + kC * kLdA;    // [C, kLdB] dTm Tm^T
  static constexpr int G = Y + kC * kLdB;     // [C, kLdA] G = K K^T . Gam (strict lower)
  static constexpr int P0 = G + kC * kLdA;    // [C, kLdB] dD / dW
  static constexpr int P1 = P0 + kC * kLdB;   // [C, kLdB] V / K
  static constexpr int Bc = P1 + kC * kLdB;   // [C] b (doubles)
  static constexpr int Eb = Bc + 2 * kC;      // [C] exp(b)
  static constexpr int Beta = Eb + kC;        // [C]
  static constexpr int Db = Beta + kC;        // [C] db
  static constexpr int Dbeta = Db + kC;       // [C] dbeta
  static constexpr int Kd = Dbeta + kC;       // [C] k . dk_Kd
  static constexpr int total = Kd + kC;
  static constexpr size_t bytes = size_t(total) * sizeof(float);
};
static_assert(WySmem::Bc % 2 == 0, "the double cumsum must be 8-byte aligned");
static_assert(WySmem::Xm % 4 == 0 && WySmem::P0 % 4 == 0 && WySmem::P1 % 4 == 0,
              "cp.async destinations must be 16-byte aligned");

template <typename T, int DK, bool Precise>
__global__ void __launch_bounds__(kThreads, 2) wyBwdKernel(const DeltaBwdParams<T> p) {
  using namespace tile;
  using L = WySmem;
  extern __shared__ __align__(16) float smem[];
  float* sX = smem + L::Xm;
  float* sT = smem + L::Tg;
  float* sY = smem + L::Y;
  float* sG = smem + L::G;
  float* sP0 = smem + L::P0;
  float* sP1 = smem + L::P1;
  double* sB = reinterpret_cast<double*>(smem + L::Bc);
  float* sEb = smem + L::Eb;
  float* sBeta = smem + L::Beta;
  float* sDb = smem + L::Db;
  float* sDbeta = smem + L::Dbeta;
  float* sKd = smem + L::Kd;

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<kC>(p, blockIdx.x, n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, warp = tid >> 5;
  const int h = blockIdx.y, H = p.heads, dv = p.value_dim;
  const int64_t tok0 = bos + chunk * kC;
  const int lc = int((len - chunk * kC) < kC ? (len - chunk * kC) : int64_t(kC));
  const int mt = warp >> 1, n0 = 32 * (warp & 1), m0 = 16 * mt;
  const bool upper = n0 > m0 + 15;
  const int nks = DK / kSlice;
  const bool want_db = p.dbpart != nullptr;

  asyncRowsF32(sX, kLdB, p.X + (blockIdx.x * int64_t(H) + h) * (kC * kC), kC, kC, kC, kC);
  loadChunkScalars<Precise>(p, tok0, lc, h, sB, sEb, nullptr, sBeta);
  if (tid < kC) {
    float a = 0.f, kd = 0.f;
    if (want_db && tid < lc)
      for (int s = 0; s < nks; ++s) {
        a += p.dbpart[s * p.rows + (tok0 + tid) * H + h];
        kd += p.kdpart[s * p.rows + (tok0 + tid) * H + h];
      }
    sDb[tid] = a;
    sKd[tid] = kd;
  }

  auto tm = [&](int t, int s) { return sX[t * kLdB + s] * sBeta[s]; };  // Tm[t][s]
  float at[kNT][4], agm[kNT][4];
  zeroAcc(at);
  zeroAcc(agm);
  // Value blocks: dTm += dD V^T; dv = Tm^T dD.
  for (int v0 = 0; v0 < dv; v0 += kSlice) {
    __syncthreads();
    asyncRowsF32(sP0, kLdB, p.dD + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    loadRowsToShared<T>(sP1, kLdA, p.v + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    asyncWaitAll();
    __syncthreads();
    if (!upper)
      warpTileProduct<kNT, Precise, kStagedSums<T>>(at, m0, n0, kSlice, [&](int t, int j) { return sP0[t * kLdB + j]; },
                                    [&](int j, int s) { return sP1[s * kLdA + j]; });
    if (p.dv) {
      float acc[kNT][4];
      zeroAcc(acc);
      // rows s >= m0 need t >= s: k runs over t = m0 + kk
      warpTileProduct<kNT, Precise, kStagedSums<T>>(
          acc, m0, n0, kC - m0, [&](int s, int kk) { return tm(m0 + kk, s); },
          [&](int kk, int j) { return sP0[(m0 + kk) * kLdB + j]; });
      storeAcc<T, kNT>(p.dv + (tok0 * H + h) * dv + v0, int64_t(H) * dv, acc, m0, n0, lc, 1.f);
    }
  }
  // Key slices: dTm += dW (K . exp(b))^T; G += K K^T.
  for (int c0 = 0; c0 < DK; c0 += kSlice) {
    __syncthreads();
    asyncRowsF32(sP0, kLdB, p.W + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    loadRowsToShared<T>(sP1, kLdA, p.k + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    asyncWaitAll();
    __syncthreads();
    if (!upper) {
      warpTileProduct<kNT, Precise, kStagedSums<T>>(at, m0, n0, kSlice, [&](int t, int c) { return sP0[t * kLdB + c]; },
                                    [&](int c, int s) { return sP1[s * kLdA + c] * sEb[s]; });
      warpTileProduct<kNT, Precise, kStagedSums<T>>(agm, m0, n0, kSlice,
                                    [&](int t, int c) { return sP1[t * kLdA + c]; },
                                    [&](int c, int s) { return sP1[s * kLdA + c]; });
    }
  }
  forEachAcc(at, m0, n0, [&](int t, int s, float& x) { sT[t * kLdA + s] = s <= t ? x : 0.f; });
  forEachAcc(agm, m0, n0, [&](int t, int s, float& x) {
    sG[t * kLdA + s] = s < t ? x * decayRatio<Precise>(sB, t, s) : 0.f;
  });
  __syncthreads();
  // dbeta_s (through Tm = X diag(beta)) = sum_{t >= s} dTm[t][s] X[t][s]
  if (tid < kC) {
    const int s = tid;
    float a = 0.f;
    for (int t = s; t < kC; ++t) a += sT[t * kLdA + s] * sX[t * kLdB + s];
    sDbeta[s] = a;
  }
  {  // Y = dTm Tm^T (Y[t][u] = sum_{s <= t} dTm[t][s] Tm[u][s])
    float acc[kNT][4];
    zeroAcc(acc);
    warpTileProduct<kNT, Precise, kStagedSums<T>>(acc, m0, n0, m0 + 16, [&](int t, int s) { return sT[t * kLdA + s]; },
                                  [&](int s, int u) { return tm(u, s); });
    forEachAcc(acc, m0, n0, [&](int t, int u, float& x) { sY[t * kLdB + u] = x; });
  }
  __syncthreads();  // sY complete, sT (dTm) reads done, sDbeta initialized
  {  // dL = -X^T Y (strict lower); dM = dL beta_a Gam; E = dL . L feeds db; dL . G feeds dbeta
    float acc[kNT][4];
    zeroAcc(acc);
    if (!upper)
      warpTileProduct<kNT, Precise, kStagedSums<T>>(
          acc, m0, n0, kC - m0, [&](int a, int kk) { return -sX[(m0 + kk) * kLdB + a]; },
          [&](int kk, int u) { return sY[(m0 + kk) * kLdB + u]; });
    float rb0 = 0.f, rb1 = 0.f, re0 = 0.f, re1 = 0.f;
    forEachAcc(acc, m0, n0, [&](int a, int u, float& x) {
      float dm = 0.f;
      if (u < a) {
        const float gv = sG[a * kLdA + u];
        const float ba = sBeta[a];
        const float e = x * ba * gv;
        if (a - m0 < 8) { rb0 += x * gv; re0 += e; }
        else { rb1 += x * gv; re1 += e; }
        if (want_db) atomicAdd(sDb + u, -e);
        dm = x * ba * decayRatio<Precise>(sB, a, u);
      }
      sT[a * kLdA + u] = dm;
    });
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      rb0 += __shfl_xor_sync(0xffffffffu, rb0, off);
      rb1 += __shfl_xor_sync(0xffffffffu, rb1, off);
      re0 += __shfl_xor_sync(0xffffffffu, re0, off);
      re1 += __shfl_xor_sync(0xffffffffu, re1, off);
    }
    const Lane ln;
    if (ln.q == 0) {
      atomicAdd(sDbeta + m0 + ln.g, rb0);
      atomicAdd(sDbeta + m0 + ln.g + 8, rb1);
      if (want_db) {
        atomicAdd(sDb + m0 + ln.g, re0);
        atomicAdd(sDb + m0 + ln.g + 8, re1);
      }
    }
  }
  // Key slices: dk = dkpart + exp(b) . (Tm^T dW) + dM K + dM^T K; db_s += k_s . exp(b_s)(Tm^T dW)_s
  for (int c0 = 0; c0 < DK; c0 += kSlice) {
    __syncthreads();  // sT (dM) complete; previous slice done
    asyncRowsF32(sP0, kLdB, p.W + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    loadRowsToShared<T>(sP1, kLdB, p.k + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    asyncWaitAll();
    __syncthreads();
    float acc[kNT][4];
    zeroAcc(acc);
    warpTileProduct<kNT, Precise, kStagedSums<T>>(
        acc, m0, n0, kC - m0, [&](int s, int kk) { return tm(m0 + kk, s); },
        [&](int kk, int c) { return sP0[(m0 + kk) * kLdB + c]; });
    forEachAcc(acc, m0, n0, [&](int s, int, float& x) { x *= sEb[s]; });
    if (want_db) rowSumsAtomic(acc, m0, n0, sDb, [&](int s, int c) { return sP1[s * kLdB + c]; });
    if (p.dk) {
      warpTileProduct<kNT, Precise, kStagedSums<T>>(acc, m0, n0, m0 + 16, [&](int s, int u) { return sT[s * kLdA + u]; },
                                    [&](int u, int c) { return sP1[u * kLdB + c]; });
      warpTileProduct<kNT, Precise, kStagedSums<T>>(
          acc, m0, n0, kC - m0, [&](int s, int kk) { return sT[(m0 + kk) * kLdA + s]; },
          [&](int kk, int c) { return sP1[(m0 + kk) * kLdB + c]; });
      const float* part = p.dkpart + (tok0 * H + h) * DK + c0;
      forEachAcc(acc, m0, n0, [&](int s, int c, float& x) {
        if (s < lc) x += part[int64_t(s) * H * DK + c];
      });
      storeAcc<T, kNT>(p.dk + (tok0 * H + h) * DK + c0, int64_t(H) * DK, acc, m0, n0, lc, 1.f);
    }
  }
  __syncthreads();  // sDb, sDbeta complete
  if (p.dbeta && tid < lc) p.dbeta[(tok0 + tid) * H + h] = sDbeta[tid];
  if (want_db && tid == 0) {
    // dg_t = Z + sum_{t' >= t} db_t' + sum_{s < t} kd_s, in double: acc = Z + sum_s kd_s, then
    // acc += db_t - kd_t walking back (the same fp32 kd_s on both sides cancel exactly)
    double acc = 0.0;
    for (int s = 0; s < nks; ++s) acc += p.zpart[s * (p.slots * H) + int64_t(blockIdx.x) * H + h];
    for (int t = 0; t < kC; ++t) acc += sKd[t];
    for (int t = kC - 1; t >= 0; --t) {
      acc += double(sDb[t]) - double(sKd[t]);
      if (t < lc) p.dg[(tok0 + t) * H + h] = float(acc);
    }
  }
}

// ---- the fixed class: run as the scalar class, g at every token ---------------------------------
/// g_tok[i] = g[i % H] over the [B, T, H] token-heads (the scalar class's layout).
__global__ void broadcastFixedGate(float* __restrict__ gt, const float* __restrict__ g, int64_t rows,
                                   int H) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows;
       i += int64_t(gridDim.x) * blockDim.x)
    gt[i] = g[i % H];
}

/// d_g[h] = the sum of the per-token dg over head h's tokens, in double and in a fixed order (one
/// CTA per head): the total of chunk-local per-token values, each within ~1e-6 of its own size.
__global__ void __launch_bounds__(kThreads) sumFixedGate(float* __restrict__ dg,
                                                         const float* __restrict__ dgt,
                                                         int64_t tokens, int H) {
  __shared__ double red[kThreads];
  const int h = blockIdx.x, tid = threadIdx.x;
  double a = 0.0;
  for (int64_t i = tid; i < tokens; i += kThreads) a += dgt[i * H + h];
  red[tid] = a;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (tid < w) red[tid] += red[tid + w];
    __syncthreads();
  }
  if (tid == 0) dg[h] = float(red[0]);
}

// ---- host ---------------------------------------------------------------------------------------
template <typename K>
void setSmem(K kernel, size_t bytes) {
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(bytes)));
}

template <typename T, int DK, bool Precise>
void launchDeltaBwd(const RecurrenceKind& kind, const RecurrenceShape& s,
                    const RecurrenceBackwardArgs& a, int N, cudaStream_t stream) {
  const int H = int(s.heads), dv = int(s.value_dim);
  const int nvb = dv / kSlice, nks = DK / kSlice;
  const bool varlen = s.cu_seqlens != nullptr;
  const int64_t chunks_per_seq = (s.seq_len + kC - 1) / kC;
  const int64_t slots = varlen ? s.seq_len / kC + N + 1 : int64_t(N) * chunks_per_seq;
  const int64_t rows = s.batch * s.seq_len * H;  // token-heads ([B, T, H]; B = 1 when varlen)
  const bool fixed = kind.decay == DecayClass::Fixed;  // run as the scalar class (above)
  const bool want_db = kind.decay != DecayClass::None && a.d_g != nullptr;
  LINAC_REQUIRE(slots <= 0x7fffffff, "deltaChunkBackward: too many chunks for the grid");

  size_t off = 0;
  auto carve = [&](size_t bytes) {
    const size_t o = off;
    off += (bytes > 0 ? bytes + 255 : 256) / 256 * 256;
    return o;
  };
  const size_t state_bytes = size_t(slots) * H * DK * dv * sizeof(float);
  const size_t o_x = carve(size_t(slots) * H * kC * kC * sizeof(float));
  const size_t o_w = carve(size_t(rows) * DK * sizeof(float));
  const size_t o_ud = carve(size_t(rows) * dv * sizeof(float));
  const size_t o_dd = carve(size_t(rows) * dv * sizeof(float));
  const size_t o_s = carve(state_bytes);
  const size_t o_ds = carve(state_bytes);
  const size_t o_dk = carve(size_t(rows) * DK * sizeof(float));
  const size_t o_db = want_db ? carve(size_t(nks) * rows * sizeof(float)) : 0;
  const size_t o_kd = want_db ? carve(size_t(nks) * rows * sizeof(float)) : 0;
  const size_t o_z = want_db ? carve(size_t(nks) * slots * H * sizeof(float)) : 0;
  const size_t o_gt = fixed ? carve(size_t(rows) * sizeof(float)) : 0;             // [B, T, H] g
  const size_t o_dgt = fixed && want_db ? carve(size_t(rows) * sizeof(float)) : 0;  // [B, T, H] dg
  char* ws = nullptr;
  LINAC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&ws), off, stream));

  DeltaBwdParams<T> p{};
  p.q = static_cast<const T*>(a.fwd.q);
  p.k = static_cast<const T*>(a.fwd.k);
  p.v = static_cast<const T*>(a.fwd.v);
  p.d_o = static_cast<const T*>(a.d_o);
  float* gtok = fixed ? reinterpret_cast<float*>(ws + o_gt) : nullptr;
  float* dgtok = fixed && want_db ? reinterpret_cast<float*>(ws + o_dgt) : nullptr;
  p.g = kind.decay == DecayClass::Scalar ? a.fwd.g : gtok;
  p.beta = a.fwd.beta;
  p.h0 = a.fwd.h0;
  p.d_ht = a.d_ht;
  p.X = reinterpret_cast<float*>(ws + o_x);
  p.W = reinterpret_cast<float*>(ws + o_w);
  p.UD = reinterpret_cast<float*>(ws + o_ud);
  p.dD = reinterpret_cast<float*>(ws + o_dd);
  p.states = reinterpret_cast<float*>(ws + o_s);
  p.dstates = reinterpret_cast<float*>(ws + o_ds);
  p.dkpart = reinterpret_cast<float*>(ws + o_dk);
  p.dbpart = want_db ? reinterpret_cast<float*>(ws + o_db) : nullptr;
  p.kdpart = want_db ? reinterpret_cast<float*>(ws + o_kd) : nullptr;
  p.zpart = want_db ? reinterpret_cast<float*>(ws + o_z) : nullptr;
  p.dq = static_cast<T*>(a.d_q);
  p.dk = static_cast<T*>(a.d_k);
  p.dv = static_cast<T*>(a.d_v);
  p.dg = want_db ? (fixed ? dgtok : a.d_g) : nullptr;
  p.dbeta = a.d_beta;
  p.dh0 = a.d_h0;
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.chunks_per_seq = chunks_per_seq > 0 ? chunks_per_seq : 1;
  p.rows = rows;
  p.slots = slots;
  p.num_seqs = N;
  p.heads = H;
  p.value_dim = dv;
  p.scale = a.fwd.scale;
  p.decay = int(fixed ? DecayClass::Scalar : kind.decay);
  if (fixed) {
    const int64_t blocks = (rows + kThreads - 1) / kThreads;
    broadcastFixedGate<<<unsigned(blocks < 1 ? 1 : blocks < 4096 ? blocks : 4096), kThreads, 0,
                         stream>>>(gtok, a.fwd.g, rows, H);
    LINAC_CUDA_CHECK_LAUNCH("delta broadcastFixedGate");
    // tokens no chunk covers keep dg = 0
    if (dgtok) LINAC_CUDA_CHECK(cudaMemsetAsync(dgtok, 0, size_t(rows) * sizeof(float), stream));
  }

  // Pass 1 feeds both scans; pass 2 (D, S_c) only the per-chunk gradients; pass 3 (dD, dS) runs
  // always: it also writes d_h0 (= d_ht when no sequence has tokens).
  const bool any_chunk_grad = p.dq || p.dk || p.dv || p.dbeta || p.dg;
  if (slots > 0) {
    auto kernel = prepKernel<T, DK, Precise>;
    setSmem(kernel, PrepSmem::bytes);
    kernel<<<dim3(unsigned(slots), H), kThreads, PrepSmem::bytes, stream>>>(p);
    LINAC_CUDA_CHECK_LAUNCH("delta prepKernel");
  }
  if (slots > 0 && any_chunk_grad) {
    auto kernel = fwdScanKernel<T, DK, Precise>;
    setSmem(kernel, ScanSmem<DK>::bytes);
    kernel<<<dim3(nvb, H, N), kThreads, ScanSmem<DK>::bytes, stream>>>(p);
    LINAC_CUDA_CHECK_LAUNCH("delta fwdScanKernel");
  }
  {
    auto kernel = bwdScanKernel<T, DK, Precise>;
    setSmem(kernel, ScanSmem<DK>::bytes);
    kernel<<<dim3(nvb, H, N), kThreads, ScanSmem<DK>::bytes, stream>>>(p);
    LINAC_CUDA_CHECK_LAUNCH("delta bwdScanKernel");
  }
  if (slots > 0 && any_chunk_grad) {
    auto kernel = dqdkKernel<T, DK, Precise>;
    setSmem(kernel, DqdkSmem::bytes);
    kernel<<<dim3(unsigned(slots), H, nks), kThreads, DqdkSmem::bytes, stream>>>(p);
    LINAC_CUDA_CHECK_LAUNCH("delta dqdkKernel");
    auto wkernel = wyBwdKernel<T, DK, Precise>;
    setSmem(wkernel, WySmem::bytes);
    wkernel<<<dim3(unsigned(slots), H), kThreads, WySmem::bytes, stream>>>(p);
    LINAC_CUDA_CHECK_LAUNCH("delta wyBwdKernel");
  }
  if (dgtok) {
    sumFixedGate<<<H, kThreads, 0, stream>>>(a.d_g, dgtok, rows / H, H);
    LINAC_CUDA_CHECK_LAUNCH("delta sumFixedGate");
  }
  LINAC_CUDA_CHECK(cudaFreeAsync(ws, stream));
}

template <typename T, int DK>
void runDeltaBwd(const RecurrenceKind& kind, const RecurrenceShape& s,
                 const RecurrenceBackwardArgs& a, int N, cudaStream_t stream) {
  // Always 3xTF32 (see the header): training requests d_beta, which needs it, and a second
  // instantiation set would double the compile time for a path nobody takes. The kernels keep the
  // Precise flag so that a 1xTF32 variant (e.g. for d_beta == d_g == null) is one line away.
  launchDeltaBwd<T, DK, /*Precise=*/true>(kind, s, a, N, stream);
}

template <typename T>
void dispatchKeyDim(const RecurrenceKind& kind, const RecurrenceShape& s,
                    const RecurrenceBackwardArgs& a, int N, cudaStream_t stream) {
  switch (s.key_dim) {
    case 64: runDeltaBwd<T, 64>(kind, s, a, N, stream); break;
    case 128: runDeltaBwd<T, 128>(kind, s, a, N, stream); break;
    case 256: runDeltaBwd<T, 256>(kind, s, a, N, stream); break;
    default:
      LINAC_REQUIRE(false, "deltaChunkBackward: key_dim must be 64, 128 or 256, got " +
                               std::to_string(s.key_dim));
  }
}

}  // namespace

bool deltaBackwardSupported(const RecurrenceKind& kind, const RecurrenceShape& shape) {
  const bool decay_ok = kind.decay == DecayClass::None || kind.decay == DecayClass::Fixed ||
                       kind.decay == DecayClass::Scalar;
  const bool dk_ok = shape.key_dim == 64 || shape.key_dim == 128 || shape.key_dim == 256;
  return decay_ok && kind.update == UpdateRule::Delta && kind.readout == Readout::Inclusive &&
         dk_ok && shape.value_dim > 0 && shape.value_dim % kSlice == 0;
}

void deltaChunkBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                        const RecurrenceBackwardArgs& args, int num_seqs, cudaStream_t stream) {
  LINAC_REQUIRE(deltaBackwardSupported(kind, shape),
                "deltaChunkBackward: unsupported kind or shape (dk " +
                    std::to_string(shape.key_dim) + ", dv " + std::to_string(shape.value_dim) + ")");
  LINAC_REQUIRE(args.fwd.beta != nullptr, "deltaChunkBackward: delta needs beta");
  LINAC_REQUIRE(kind.decay == DecayClass::None || args.fwd.g != nullptr,
                "deltaChunkBackward: a decay needs g");
  LINAC_REQUIRE(num_seqs > 0 && num_seqs <= 65535 && shape.heads <= 65535,
                "deltaChunkBackward: grid too large (N and H must be <= 65535)");
  switch (dtype) {
    case DType::F32: dispatchKeyDim<float>(kind, shape, args, num_seqs, stream); break;
    case DType::BF16: dispatchKeyDim<__nv_bfloat16>(kind, shape, args, num_seqs, stream); break;
    case DType::F16: dispatchKeyDim<__half>(kind, shape, args, num_seqs, stream); break;
  }
}

}  // namespace linac::kernels::cuda
