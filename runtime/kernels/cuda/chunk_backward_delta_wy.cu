// Pass 5 of the delta rule's tensor-core backward (chunk_backward_delta.cu states the maths, the
// numerics and the other passes): wyBwdKernel, one CTA per (chunk, head), the gradient through the
// WY representation:
//   dTm = dW (K . exp(b))^T + dD V^T (lower, incl.),  dv = Tm^T dD                     (final)
//   dL  = -X^T (dTm Tm^T) (strict lower),  dM = dL . beta_t Gam
//   dbeta_s = sum_t dTm_ts X_ts + sum_s' dL_ss' G_ss'                                   (final)
//   dk  = dkpart + exp(b) . (Tm^T dW) + dM K + dM^T K                                   (final)
//   dg_t = Z + sum_{t' >= t} db_t' + sum_{s < t} kd_s  (final; db_t adds k_t.(exp(b) Tm^T dW)_t and
//          sum_s E_ts - sum_t' E_t't, E = dL . L; the in-chunk reverse cumsum in double).
#include "chunk_backward_delta.cuh"

namespace linac::kernels::cuda {
namespace {

using namespace delta_bwd;

// ---- pass 5: WY backward per (chunk, head) -------------------------------------------------------
struct WySmem {
  static constexpr int Xm = 0;                // [C, kLdB] X
  static constexpr int Tg = Xm + kC * kLdB;   // [C, kLdA] dTm (lower incl.), later dM
  static constexpr int Y = Tg + kC * kLdA;    // [C, kLdB] dTm Tm^T
  static constexpr int G = Y + kC * kLdB;     // [C, kLdA] G = K K^T . Gam (strict lower), then E = dL . L
  static constexpr int P0 = G + kC * kLdA;    // [C, kLdB] dD / dW
  static constexpr int P1 = P0 + kC * kLdB;   // [C, kLdB] V / K
  static constexpr int Bc = P1 + kC * kLdB;   // [C] b (doubles)
  static constexpr int Eb = Bc + 2 * kC;      // [C] exp(b)
  static constexpr int Beta = Eb + kC;        // [C]
  static constexpr int Db = Beta + kC;        // [C] db: pass 4's partials, summed
  static constexpr int DbRows = Db + kC;      // [2, C] db's row sums here, by column half (rowSumsInto)
  static constexpr int DbCols = DbRows + 2 * kC;  // [C] db's column sums of E, a fixed order
  static constexpr int Dbeta = DbCols + kC;   // [C] dbeta: sum_t dTm_ts X_ts
  static constexpr int DbetaRows = Dbeta + kC;  // [2, C] dbeta's row sums of dL . G, by column half
  static constexpr int Kd = DbetaRows + 2 * kC;  // [C] k . dk_Kd
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
  float* sDbRows = smem + L::DbRows;
  float* sDbCols = smem + L::DbCols;
  float* sDbeta = smem + L::Dbeta;
  float* sDbetaRows = smem + L::DbetaRows;
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
    sDbRows[tid] = sDbRows[kC + tid] = 0.f;
    sDbetaRows[tid] = sDbetaRows[kC + tid] = 0.f;
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
  // dL = -X^T Y (strict lower); dM = dL beta_a Gam; E = dL . L feeds db (its rows and columns);
  // dL . G feeds dbeta. E is stored over G (each element read, then written, by one thread; G is
  // not read again) for its column sums below.
  {
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
        if (want_db) sG[a * kLdA + u] = e;
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
    if (ln.q == 0) {  // each (column half, row) has this one writer (rowSumsInto's layout)
      float* dbetaRows = sDbetaRows + (n0 / 32) * kC;
      dbetaRows[m0 + ln.g] += rb0;
      dbetaRows[m0 + ln.g + 8] += rb1;
      if (want_db) {
        float* dbRows = sDbRows + (n0 / 32) * kC;
        dbRows[m0 + ln.g] += re0;
        dbRows[m0 + ln.g + 8] += re1;
      }
    }
  }
  __syncthreads();  // E complete
  if (want_db && tid < kC) {  // db_u -= sum_{a > u} E[a][u], a ascending
    const int u = tid;
    float a = 0.f;
    for (int r = u + 1; r < kC; ++r) a += sG[r * kLdA + u];
    sDbCols[u] = a;
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
    if (want_db) rowSumsInto(acc, m0, n0, sDbRows, [&](int s, int c) { return sP1[s * kLdB + c]; });
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
  __syncthreads();  // db's and dbeta's parts complete
  if (p.dbeta && tid < lc) p.dbeta[(tok0 + tid) * H + h] = (sDbeta[tid] + sDbetaRows[tid]) + sDbetaRows[kC + tid];
  if (want_db && tid == 0) {
    // dg_t = Z + sum_{t' >= t} db_t' + sum_{s < t} kd_s, in double: acc = Z + sum_s kd_s, then
    // acc += db_t - kd_t walking back (the same fp32 kd_s on both sides cancel exactly)
    double acc = 0.0;
    for (int s = 0; s < nks; ++s) acc += p.zpart[s * (p.slots * H) + int64_t(blockIdx.x) * H + h];
    for (int t = 0; t < kC; ++t) acc += sKd[t];
    for (int t = kC - 1; t >= 0; --t) {
      const double db = double(sDb[t]) + double(sDbRows[t]) + double(sDbRows[kC + t]) - double(sDbCols[t]);
      acc += db - double(sKd[t]);
      if (t < lc) p.dg[(tok0 + t) * H + h] = float(acc);
    }
  }
}

}  // namespace

namespace delta_bwd {

template <typename T, int DK, bool Precise>
void launchWyBwd(const DeltaBwdParams<T>& p, cudaStream_t stream) {
  auto kernel = wyBwdKernel<T, DK, Precise>;
  setSmem(kernel, WySmem::bytes);
  const dim3 grid(unsigned(p.slots), p.heads);
  kernel<<<grid, kThreads, WySmem::bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("delta wyBwdKernel");
}

#define LINAC_INSTANTIATE(T, DK, PRECISE) \
  template void launchWyBwd<T, DK, PRECISE>(const DeltaBwdParams<T>&, cudaStream_t);
LINAC_DELTA_BWD_CONFIGS(LINAC_INSTANTIATE)
#undef LINAC_INSTANTIATE

}  // namespace delta_bwd
}  // namespace linac::kernels::cuda
