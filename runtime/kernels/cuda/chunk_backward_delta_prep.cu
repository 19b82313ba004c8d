// Pass 1 of the delta rule's tensor-core backward (chunk_backward_delta.cu states the maths, the
// numerics and the other passes): prepKernel, one CTA per (chunk, head), rebuilds the chunk's WY
// representation and the local part of dD:
//   G   = strict_tril(K K^T . Gam),  L = diag(beta) G,  A' = scale tril(Q K^T . Gam)  (key slices)
//   X   = (I + L)^-1, by forward substitution (64 threads, one column each, as chunk_forward.cuh)
//   W   = Tm (K . exp(b)),  U = Tm V  (Tm = X diag(beta)),  dD_local = A'^T dO  (= scale A^T dO)
// and writes X, W, U and dD_local to the workspace.
#include "chunk_backward_delta.cuh"

namespace linac::kernels::cuda {
namespace {

using namespace delta_bwd;

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
static_assert(PrepSmem::Bc % 2 == 0, "the double cumsum must be 8-byte aligned");

}  // namespace

namespace delta_bwd {

template <typename T, int DK, bool Precise>
void launchPrep(const DeltaBwdParams<T>& p, cudaStream_t stream) {
  auto kernel = prepKernel<T, DK, Precise>;
  setSmem(kernel, PrepSmem::bytes);
  const dim3 grid(unsigned(p.slots), p.heads);
  kernel<<<grid, kThreads, PrepSmem::bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("delta prepKernel");
}

#define LINAC_INSTANTIATE(T, DK, PRECISE) \
  template void launchPrep<T, DK, PRECISE>(const DeltaBwdParams<T>&, cudaStream_t);
LINAC_DELTA_BWD_CONFIGS(LINAC_INSTANTIATE)
#undef LINAC_INSTANTIATE

}  // namespace delta_bwd
}  // namespace linac::kernels::cuda
