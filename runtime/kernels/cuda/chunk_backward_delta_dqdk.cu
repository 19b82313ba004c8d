// Pass 4 of the delta rule's tensor-core backward (chunk_backward_delta.cu states the maths, the
// numerics and the other passes): dqdkKernel, one CTA per (chunk, head, key slice of 64), loop over
// value blocks:
//   dA' = scale (dO D^T) . Gam (lower, incl.)
//   dq  = scale exp(b) . (dO S_c^T) + dA' K                     (final)
//   dk  = exp(b_C - b) . (D dS_{c+1}^T) + dA'^T Q               (Kd and intra parts, to dkpart)
//   dW  = -dD S_c^T                                              (overwrites W)
// and, for d_g, the key slice's partials of db_t = q_t.dq_t - k_t.dk_intra_t, kd_t = k_t.(dk_Kd)_t
// and Z = exp(b_C) <S_c, dS_{c+1}>, dA'_tt (q_t.k_t) left out of db (it cancels exactly).
#include "chunk_backward_delta.cuh"

namespace linac::kernels::cuda {
namespace {

using namespace delta_bwd;

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
  static constexpr int Row = Ec + kC;         // [2, C] db partial rows, by column half (rowSumsInto)
  static constexpr int Kd = Row + 2 * kC;     // [2, C] k . dk_Kd partial rows, by column half
  static constexpr int Dg = Kd + 2 * kC;      // [C] dA'_tt (the diagonal of dA')
  static constexpr int Red = Dg + kC;         // [kWarps]
  static constexpr int total = Red + kWarps;
  static constexpr size_t bytes = size_t(total) * sizeof(float);
};
static_assert(DqdkSmem::Bc % 2 == 0, "the double cumsum must be 8-byte aligned");
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
    sRow[tid] = sRow[kC + tid] = 0.f;
    sKd[tid] = sKd[kC + tid] = 0.f;
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
  if (want_db) rowSumsInto(ak, m0, n0, sKd, [&](int s, int c) { return sK[s * kLdB + c]; });
  // dk (intra part) = dA'^T Q  (t > s >= m0: k runs over t = m0 + kk), in its own accumulator
  float ai[kNT][4];
  zeroAcc(ai);
  warpTileProduct<kNT, Precise, kStagedSums<T>>(
      ai, m0, n0, kC - m0, [&](int s, int kk) { return sdA[(m0 + kk) * kLdA + s]; },
      [&](int kk, int c) { return sQ[(m0 + kk) * kLdB + c]; });
  if (want_db) {
    // db_t partial = q_t . dq_t - k_t . dk_intra_t (this key slice, dA' without its diagonal)
    rowSumsInto(aq, m0, n0, sRow, [&](int t, int c) { return sQ[t * kLdB + c]; });
    rowSumsInto(ai, m0, n0, sRow, [&](int t, int c) { return -sK[t * kLdB + c]; });
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
      p.dbpart[ks * p.rows + (tok0 + tid) * H + h] = sRow[tid] + sRow[kC + tid];
      p.kdpart[ks * p.rows + (tok0 + tid) * H + h] = sKd[tid] + sKd[kC + tid];
    }
    if (tid == 0) {
      float a = 0.f;
      for (int w = 0; w < kWarps; ++w) a += sRed[w];
      p.zpart[ks * (p.slots * H) + int64_t(blockIdx.x) * H + h] = a;
    }
  }
}

}  // namespace

namespace delta_bwd {

template <typename T, int DK, bool Precise>
void launchDqdk(const DeltaBwdParams<T>& p, cudaStream_t stream) {
  auto kernel = dqdkKernel<T, DK, Precise>;
  setSmem(kernel, DqdkSmem::bytes);
  const dim3 grid(unsigned(p.slots), p.heads, DK / kSlice);
  kernel<<<grid, kThreads, DqdkSmem::bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("delta dqdkKernel");
}

#define LINAC_INSTANTIATE(T, DK, PRECISE) \
  template void launchDqdk<T, DK, PRECISE>(const DeltaBwdParams<T>&, cudaStream_t);
LINAC_DELTA_BWD_CONFIGS(LINAC_INSTANTIATE)
#undef LINAC_INSTANTIATE

}  // namespace delta_bwd
}  // namespace linac::kernels::cuda
