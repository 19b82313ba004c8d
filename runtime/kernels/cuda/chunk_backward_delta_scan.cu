// Passes 2-3 of the delta rule's tensor-core backward (chunk_backward_delta.cu states the maths,
// the numerics and the other passes): the state scans, one CTA per (value block of 64, head,
// sequence), sequential over the sequence's chunks, Kd = K . exp(b_C - b):
//   2 fwdScanKernel  S_0 = h0 (or 0); per chunk: states[c] = S_c, D = U - W S_c (overwrites U),
//                    S_{c+1} = exp(b_C) S_c + Kd^T D.
//   3 bwdScanKernel  dS = d_ht (or 0) after the last chunk; per chunk, last first:
//                    dstates[c] = dS_{c+1}, dD = dD_local + Kd dS_{c+1} (overwrites dD_local),
//                    dS_c = exp(b_C) dS_{c+1} - W^T dD + scale (Q . exp(b))^T dO;  d_h0 = dS_0.
#include "chunk_backward_delta.cuh"

namespace linac::kernels::cuda {
namespace {

using namespace delta_bwd;

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

}  // namespace

namespace delta_bwd {

template <typename T, int DK, bool Precise>
void launchFwdScan(const DeltaBwdParams<T>& p, cudaStream_t stream) {
  auto kernel = fwdScanKernel<T, DK, Precise>;
  setSmem(kernel, ScanSmem<DK>::bytes);
  const dim3 grid(p.value_dim / kSlice, p.heads, p.num_seqs);
  kernel<<<grid, kThreads, ScanSmem<DK>::bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("delta fwdScanKernel");
}

template <typename T, int DK, bool Precise>
void launchBwdScan(const DeltaBwdParams<T>& p, cudaStream_t stream) {
  auto kernel = bwdScanKernel<T, DK, Precise>;
  setSmem(kernel, ScanSmem<DK>::bytes);
  const dim3 grid(p.value_dim / kSlice, p.heads, p.num_seqs);
  kernel<<<grid, kThreads, ScanSmem<DK>::bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("delta bwdScanKernel");
}

#define LINAC_INSTANTIATE(T, DK, PRECISE) \
  template void launchFwdScan<T, DK, PRECISE>(const DeltaBwdParams<T>&, cudaStream_t); \
  template void launchBwdScan<T, DK, PRECISE>(const DeltaBwdParams<T>&, cudaStream_t);
LINAC_DELTA_BWD_CONFIGS(LINAC_INSTANTIATE)
#undef LINAC_INSTANTIATE

}  // namespace delta_bwd
}  // namespace linac::kernels::cuda
