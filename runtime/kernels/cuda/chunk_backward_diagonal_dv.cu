// Pass 3 of the diagonal decay's tensor-core backward (chunk_backward_diagonal.cu states the
// maths, the numerics and the other passes): diagDvKernel, one CTA per
// (chunk, head, value block of 64), loop over key slices:
//   A[t][s]  = scale sum_c q_tc k_sc e^{bq_tc - b_sc}   (s <= t inclusive, s < t exclusive)
//   dv_s     = (K . e^{B - b})_s dS_{c+1} + sum_t A[t][s] do_t
//              [+ scale (q_s . (u * k_s)) do_s exclusive]
#include "chunk_backward_diagonal.cuh"

namespace linac::kernels::cuda {
namespace {

using namespace diag_bwd;

// ---- pass 3: dv per (chunk, head, value block) --------------------------------------------------
struct DvSmem {
  static constexpr int Q = 0;                    // [C, kLdA]   q slice (B^T operand)
  static constexpr int K = Q + kC * kLdA;        // [C, kLdA]   k slice (A operand)
  static constexpr int Bc = K + kC * kLdA;       // [C, kLdA]   b of the slice
  static constexpr int dS = Bc + kC * kLdA;      // [kSlice, kLdB] dS_{c+1} slice rows (B direct)
  static constexpr int dO = dS + kSlice * kLdB;  // [C, kLdB]   d_o value block (B direct)
  static constexpr int At = dO + kC * kLdB;      // [C, kLdA]   A^T (rows s, columns t)
  static constexpr int Tot = At + kC * kLdA;     // [kParts * kSlice] doubles: cumsum scratch
  static constexpr int Bon = Tot + 2 * kParts * kSlice;  // [C] scale (q . (u * k)) (exclusive)
  static constexpr int total = Bon + kC;
  static constexpr size_t bytes = size_t(total) * sizeof(float);
};
static_assert(DvSmem::dS % 4 == 0 && kLdB % 4 == 0, "cp.async destinations must be 16-byte aligned");
static_assert(DvSmem::Tot % 2 == 0, "double scratch must be 8-byte aligned");

template <typename T, int DK, bool Precise>
__global__ void __launch_bounds__(kThreads, 2) diagDvKernel(const DiagBwdParams<T> p) {
  using namespace tile;
  using L = DvSmem;
  extern __shared__ __align__(16) float smem[];
  float* sQ = smem + L::Q;
  float* sK = smem + L::K;
  float* sB = smem + L::Bc;
  float* sdS = smem + L::dS;
  float* sdO = smem + L::dO;
  float* sAt = smem + L::At;
  double* sTot = reinterpret_cast<double*>(smem + L::Tot);
  float* sBon = smem + L::Bon;

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<kC>(p, blockIdx.x, n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, warp = tid >> 5;
  const int h = blockIdx.y, v0 = blockIdx.z * kSlice;
  const int H = p.heads, dv = p.value_dim;
  const bool excl = p.exclusive != 0;
  const int64_t tok0 = bos + chunk * kC;
  const int lc = int((len - chunk * kC) < kC ? (len - chunk * kC) : int64_t(kC));
  const int64_t sbase = ((coff + chunk) * H + h) * int64_t(DK) * dv + v0;

  loadRowsToShared<T>(sdO, kLdB, p.d_o + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);

  auto b = [&](int t, int c) -> float { return sB[t * kLdA + c]; };
  auto bq = [&](int t, int c) -> float { return excl ? (t > 0 ? b(t - 1, c) : 0.f) : b(t, c); };
  const int mt = warp >> 1, n0 = 8 * kNT * (warp & 1);
  // The warp's A^T tile (rows s in sub-block mt, columns t in n0..n0+31) has off-diagonal entries
  // when its last token sub-block comes after mt.
  const bool offdiag = (n0 / kSub + (8 * kNT) / kSub - 1) > mt;
  float adv[kNT][4], aat[kNT][4];
  zeroAcc(adv);
  zeroAcc(aat);
  float dacc[kNSub];  // diagonal sub-block entries owned by this thread: s, t below
#pragma unroll
  for (int m = 0; m < kNSub; ++m) dacc[m] = 0.f;
  const int ds = tid >> 4, dt = tid & 15;  // (s, t) within a sub-block; kThreads == 16 * 16
  static_assert(kThreads == kSub * kSub, "one diagonal entry per thread per sub-block");
  float bonus = 0.f;  // exclusive: q_t . (u * k_t) of token t = tid (tid < kC)

  for (int c0 = 0; c0 < DK; c0 += kSlice) {
    __syncthreads();  // previous slice's reads done
    asyncLoadSquare<kThreads, kSlice>(sdS, kLdB, p.dstates + sbase + int64_t(c0) * dv, dv);
    loadRowsToShared<T>(sQ, kLdA, p.q + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    loadRowsToShared<T>(sK, kLdA, p.k + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    loadRowsToShared<float>(sB, kLdA, p.g + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
    asyncWaitAll();
    __syncthreads();
    channelCumsum(sB, kLdA, sTot,
                  [&](int t, int c, double bb, double, double) { sB[t * kLdA + c] = float(bb); });
    __syncthreads();
    // adv[s][j] += sum_c K[s][c] e^{B_c - b_sc} dS[c][j]
    warpTileProduct<kNT, Precise>(
        adv, 16 * mt, n0, kSlice,
        [&](int s, int c) { return sK[s * kLdA + c] * fastExp<Precise>(b(kC - 1, c) - b(s, c)); },
        [&](int c, int j) { return sdS[c * kLdB + j]; });
    if (offdiag) {  // aat[s][t] += sum_c K[s][c] e^{b_r - b_s} Q[t][c] e^{bq_t - b_r}, t > r
      const int r = kSub * mt + kSub - 1, tfirst = kSub * (mt + 1);
      warpTileProduct<kNT, Precise>(
          aat, 16 * mt, n0, kSlice,
          [&](int s, int c) { return sK[s * kLdA + c] * fastExp<Precise>(b(r, c) - b(s, c)); },
          [&](int c, int t) {
            return t >= tfirst ? sQ[t * kLdA + c] * fastExp<Precise>(bq(t, c) - b(r, c)) : 0.f;
          });
    }
#pragma unroll
    for (int m = 0; m < kNSub; ++m) {  // diagonal sub-blocks, elementwise
      const int s = kSub * m + ds, t = kSub * m + dt;
      if (excl ? (t > s) : (t >= s)) {
        float a = 0.f;
#pragma unroll 8
        for (int c = 0; c < kSlice; ++c)
          a += sQ[t * kLdA + c] * sK[s * kLdA + c] * fastExp<Precise>(bq(t, c) - b(s, c));
        dacc[m] += a;
      }
    }
    if (excl && tid < kC) {
      const float* u = p.u + int64_t(h) * DK + c0;
      float a = 0.f;
      for (int c = 0; c < kSlice; ++c) a += sQ[tid * kLdA + c] * u[c] * sK[tid * kLdA + c];
      bonus += a;
    }
  }
  const float scale = p.scale;
  // A^T off the diagonal sub-blocks (zero for t-blocks before s-block), then the diagonal ones.
  forEachAcc(aat, 16 * mt, n0, [&](int s, int t, float& x) {
    const int tb = t / kSub;
    if (tb != mt) sAt[s * kLdA + t] = tb > mt ? scale * x : 0.f;
  });
#pragma unroll
  for (int m = 0; m < kNSub; ++m) {
    const int s = kSub * m + ds, t = kSub * m + dt;
    sAt[s * kLdA + t] = (excl ? (t > s) : (t >= s)) ? scale * dacc[m] : 0.f;
  }
  if (excl && tid < kC) sBon[tid] = scale * bonus;
  __syncthreads();
  // adv[s][j] += sum_{t >= s} At[s][t] dO[t][j]; rows s >= 16 mt, so t runs over t0 + kk.
  const int t0 = kSub * mt;
  warpTileProduct<kNT, Precise>(
      adv, 16 * mt, n0, kC - t0, [&](int s, int kk) { return sAt[s * kLdA + t0 + kk]; },
      [&](int kk, int j) { return sdO[(t0 + kk) * kLdB + j]; });
  if (excl)
    forEachAcc(adv, 16 * mt, n0, [&](int s, int j, float& x) { x += sBon[s] * sdO[s * kLdB + j]; });
  storeAcc<T, kNT>(p.dv + (tok0 * H + h) * dv + v0, int64_t(H) * dv, adv, 16 * mt, n0, lc, 1.f);
}

}  // namespace

namespace diag_bwd {

template <typename T, int DK, bool Precise>
void launchDiagDv(const DiagBwdParams<T>& p, int64_t slots, cudaStream_t stream) {
  auto kernel = diagDvKernel<T, DK, Precise>;
  setSmem(kernel, DvSmem::bytes);
  const dim3 grid(unsigned(slots), p.heads, p.value_dim / kSlice);
  kernel<<<grid, kThreads, DvSmem::bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("diagDvKernel");
}

#define LINAC_INSTANTIATE(T, DK, PRECISE) \
  template void launchDiagDv<T, DK, PRECISE>(const DiagBwdParams<T>&, int64_t, cudaStream_t);
LINAC_DIAG_BWD_CONFIGS(LINAC_INSTANTIATE)
#undef LINAC_INSTANTIATE

}  // namespace diag_bwd
}  // namespace linac::kernels::cuda
