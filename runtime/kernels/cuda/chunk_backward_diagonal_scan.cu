// Pass 1 of the diagonal decay's tensor-core backward (chunk_backward_diagonal.cu states the
// maths, the numerics and the other passes): diagStateScanKernel, one CTA per
// (value block of 64, head x key slice of 64, sequence x direction), sequential over chunks (every
// key row of the state evolves independently):
//   forward:  S_0 = h0,   S_{c+1} = diag(e^B) S_c + (K . e^{B - b})^T V;    ws_S[c] = S_c
//   reverse:  dS_end = d_ht, dS_c = diag(e^B) dS_{c+1} + scale (Q . e^{bq})^T dO;
//             ws_dS[c] = dS_{c+1};  d_h0 = dS_0
#include "chunk_backward_diagonal.cuh"

namespace linac::kernels::cuda {
namespace {

using namespace diag_bwd;

// ---- pass 1: chunk-start states (forward) and chunk-end state gradients (reverse) -------------
struct ScanSmem {
  static constexpr int LD = kLdB;            // X / F read as A(m = c, k = t) = X[t][c]; Y as B(t, j)
  static constexpr int X = 0;                // [C, LD]      K (forward) or Q (reverse) key slice
  static constexpr int F = X + kC * LD;      // [C, LD]      log-decays -> per-(t, c) factor
  static constexpr int Y = F + kC * LD;      // [C, LD]      V (forward) or dO (reverse) value block
  static constexpr int S = Y + kC * LD;      // [kSlice, LD] carried state (gradient) block
  static constexpr int Tot = S + kSlice * LD;   // [kParts * kSlice] doubles: cumsum scratch
  static constexpr int EB = Tot + 2 * kParts * kSlice;  // [kSlice] e^B
  static constexpr int total = EB + kSlice;
  static constexpr size_t bytes = size_t(total) * sizeof(float);
};
static_assert(ScanSmem::Tot % 2 == 0, "double scratch must be 8-byte aligned");

template <typename T, int DK, bool Precise>
__global__ void __launch_bounds__(kThreads) diagStateScanKernel(const DiagBwdParams<T> p) {
  using namespace tile;
  using L = ScanSmem;
  constexpr int kNks = DK / kSlice;
  extern __shared__ __align__(16) float smem[];
  float* sX = smem + L::X;
  float* sF = smem + L::F;
  float* sY = smem + L::Y;
  float* sS = smem + L::S;
  double* sTot = reinterpret_cast<double*>(smem + L::Tot);
  float* sEB = smem + L::EB;

  const int tid = threadIdx.x, warp = tid >> 5;
  const int vb = blockIdx.x, h = int(blockIdx.y) / kNks, ks = int(blockIdx.y) % kNks;
  const int N = p.num_seqs;
  const bool reverse = int(blockIdx.z) >= N;
  const int n = reverse ? int(blockIdx.z) - N : int(blockIdx.z);
  const int H = p.heads, dv = p.value_dim, v0 = vb * kSlice, c0 = ks * kSlice;
  const bool excl = p.exclusive != 0;
  int64_t bos, len, coff;
  seqInfo<kC>(p, n, bos, len, coff);
  const T* X = reverse ? p.q : p.k;
  const T* Y = reverse ? p.d_o : p.v;
  float* out = reverse ? p.dstates : p.states;
  const float* init = reverse ? p.d_ht : p.h0;
  const int64_t hbase = ((int64_t(n) * H + h) * DK + c0) * dv + v0;  // [N, H, DK, dv] block origin

  for (int i = tid; i < kSlice * kSlice; i += kThreads) {
    const int c = i / kSlice, j = i - c * kSlice;
    sS[c * L::LD + j] = init ? init[hbase + int64_t(c) * dv + j] : 0.f;
  }

  const int64_t nch = (len + kC - 1) / kC;
  ChunkFetcher<T, kC, kSlice, kThreads> fx, fy;
  ChunkFetcher<float, kC, kSlice, kThreads> fg;
  auto fetch = [&](int64_t ch) {
    const int64_t cs = ch * kC;
    const int lc = int((len - cs) < kC ? (len - cs) : int64_t(kC));
    const int64_t tk = bos + cs;
    fx.fetch(X + (tk * H + h) * DK + c0, int64_t(H) * DK, lc);
    fy.fetch(Y + (tk * H + h) * dv + v0, int64_t(H) * dv, lc);
    fg.fetch(p.g + (tk * H + h) * DK + c0, int64_t(H) * DK, lc);
  };
  if (nch > 0) fetch(reverse ? nch - 1 : 0);

  const float scale = p.scale;
  for (int64_t i = 0; i < nch; ++i) {
    const int64_t ch = reverse ? nch - 1 - i : i;
    __syncthreads();  // previous update of sS done; sX, sF, sY, sTot, sEB free
    fx.commit(sX, L::LD);
    fy.commit(sY, L::LD);
    fg.commit(sF, L::LD);
    {  // ws[ch] = the carried block before this chunk's update
      float* dst = out + ((coff + ch) * H + h) * int64_t(DK) * dv + int64_t(c0) * dv + v0;
      for (int e = tid; e < kSlice * (kSlice / 4); e += kThreads) {
        const int c = e / (kSlice / 4), j = (e - c * (kSlice / 4)) * 4;
        *reinterpret_cast<float4*>(dst + int64_t(c) * dv + j) =
            *reinterpret_cast<const float4*>(sS + c * L::LD + j);
      }
    }
    if (i + 1 < nch) fetch(reverse ? ch - 1 : ch + 1);
    __syncthreads();
    // sF[t][c] <- e^{B - b_t} (forward) or scale e^{bq_t} (reverse); sEB[c] = e^B.
    channelCumsum(sF, L::LD, sTot, [&](int t, int c, double b, double bprev, double B) {
      if (t == kC - 1) sEB[c] = fastExp<Precise>(float(B));
      sF[t * L::LD + c] = reverse ? scale * fastExp<Precise>(float(excl ? bprev : b))
                                  : fastExp<Precise>(float(B - b));
    });
    __syncthreads();
    // sS = diag(e^B) sS + sum_t X[t]^T diag(F_t) Y[t]: one 16 x 32 tile per warp.
    {
      const int mt = warp >> 1, n0 = 8 * kNT * (warp & 1);
      float acc[kNT][4];
      forEachAcc(acc, 16 * mt, n0, [&](int c, int j, float& x) { x = sS[c * L::LD + j] * sEB[c]; });
      warpTileProduct<kNT, Precise>(
          acc, 16 * mt, n0, kC, [&](int c, int t) { return sX[t * L::LD + c] * sF[t * L::LD + c]; },
          [&](int t, int j) { return sY[t * L::LD + j]; });
      forEachAcc(acc, 16 * mt, n0, [&](int c, int j, float& x) { sS[c * L::LD + j] = x; });
    }
  }
  __syncthreads();
  if (reverse) {
    if (p.dh0)
      for (int i = tid; i < kSlice * kSlice; i += kThreads) {
        const int c = i / kSlice, j = i - c * kSlice;
        p.dh0[hbase + int64_t(c) * dv + j] = sS[c * L::LD + j];
      }
  }
}

}  // namespace

namespace diag_bwd {

template <typename T, int DK, bool Precise>
void launchDiagStateScan(const DiagBwdParams<T>& p, cudaStream_t stream) {
  auto kernel = diagStateScanKernel<T, DK, Precise>;
  setSmem(kernel, ScanSmem::bytes);
  const dim3 grid(p.value_dim / kSlice, p.heads * (DK / kSlice), 2 * p.num_seqs);
  kernel<<<grid, kThreads, ScanSmem::bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("diagStateScanKernel");
}

#define LINAC_INSTANTIATE(T, DK, PRECISE) \
  template void launchDiagStateScan<T, DK, PRECISE>(const DiagBwdParams<T>&, cudaStream_t);
LINAC_DIAG_BWD_CONFIGS(LINAC_INSTANTIATE)
#undef LINAC_INSTANTIATE

}  // namespace diag_bwd
}  // namespace linac::kernels::cuda
