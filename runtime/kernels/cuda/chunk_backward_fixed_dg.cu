// fp32 fixed-class d_g of the additive rule's tensor-core backward (chunk_backward_additive.cu
// states the rest of its maths; tests/runtime/cuda/additive_bwd_f32_check.py models it), in double
// from the inputs alone.
#include "chunk_backward_additive.cuh"
#include "chunk_backward_paths.h"
#include "chunk_slots.cuh"
#include "workspace.h"

#include "cuda_check.h"

#include <string>

namespace linac::kernels::cuda {
namespace {

using namespace additive_bwd;

// ---- fp32 inputs, fixed class: d_g in double from the inputs alone ------------------------------
// With one g per head, d_g is the sum of dg_t over every token of every sequence: chunk terms of
// ~10^3 with random signs whose total can land 10^2-10^4 below them on random inputs, so any fp32
// value on the way (pass 2's products and row sums, pass 1's stored states) crossed the 1e-5 gate on
// some draws (NOTES.md, "fp32 additive backward's d_g"). Summed over a chunk's tokens, pass 2's
// expansion of dg_t is
//   sum_{t < lc} dg_t = <S_c, sum_t (t + 1) w_t q_t do_t^T> + <lc e_C S_c + H_c, dS_{c+1}>
//                       + sum_{s < t} W[t][s] (do_t . v_s)(q_t . k_s)
// with w_t = scale exp(b_t), e_C = exp(b_C), H_c = sum_s (lc - 1 - s) exp(b_C - b_s) k_s v_s^T and
// W[t][s] = (t - s) scale exp(b_t - b_s). Since dS_{c+1} = R_{c+1} + e_{C,c+1} dS_{c+2} with
// R_c = sum_t w_t q_t do_t^T (pass 1's reverse step) and dS = d_ht after the last chunk, the terms
// in dS_{c+1} move onto a second forward state: Y_0 = 0, Y_{c+1} = e_C (Y_c + lc S_c) + H_c, and
//   d_g = sum_c [ sum_t w_t q_t^T ((t + 1) S_c + Y_c) do_t + sum_{s < t} W[t][s] (do_t . v_s)(q_t . k_s) ]
//         + <Y_end, d_ht>,
// one forward scan, S_{c+1} = e_C S_c + sum_s exp(b_C - b_s) k_s v_s^T, every product and sum in
// double on the CUDA cores (products of fp32 values are exact in double): no fp32 value but the
// written d_g. Key rows are independent and every term is bilinear in (key slice, value block),
// so one CTA per (key slice, value block, head, sequence) carries its 64 x 64 blocks of S and Y
// (thread (ti, tj) = (tid / 16, tid % 16) owns rows ti + 16 a, columns tj + 16 b, a, b < 4) and
// writes its part to part [N, H, DK / kSlice * ceil(dv / kSlice)]. The last value block of a dv
// that is not a multiple of kSlice holds zeros past dv (v, d_o, h0 and d_ht read as zero there), which
// adds nothing to any term. The chunk's tiles are converted to double once, as they are stored (each
// element is read by 32 threads).
struct FixedDgSmem {  // offsets in doubles
  static constexpr int LD = kSlice + 1;        // column reads X[tj + 16 b][j] hit 16 distinct bank pairs
  static constexpr int Q = 0;                  // [C, LD] q slice
  static constexpr int K = Q + kC * LD;        // [C, LD] k slice
  static constexpr int dO = K + kC * LD;       // [C, LD] d_o value block
  static constexpr int V = dO + kC * LD;       // [C, LD] v value block
  static constexpr int Bc = V + kC * LD;       // [C] cumulative log-decay b_t
  static constexpr int W = Bc + kC;            // [C] w_t = scale exp(b_t)
  static constexpr int F = W + kC;             // [C] exp(b_C - b_t)
  static constexpr int Red = F + kC;           // [kWarps] warp sums
  static constexpr int total = Red + kWarps;
  static constexpr size_t bytes = size_t(total) * sizeof(double);
};

/// Stores rows [0, C) x columns [0, kSlice) of a row-strided fp32 matrix (row r at src + r * stride)
/// as doubles with leading dimension FixedDgSmem::LD; rows >= valid and columns >= cols are zeros.
/// Whole CTA.
__device__ __forceinline__ void loadChunkF64(double* __restrict__ dst, const float* __restrict__ src,
                                             int64_t stride, int valid, int cols) {
  for (int i = threadIdx.x; i < kC * kSlice; i += blockDim.x) {
    const int r = i / kSlice, c = i - r * kSlice;
    dst[r * FixedDgSmem::LD + c] = r < valid && c < cols ? double(__ldg(src + r * stride + c)) : 0.0;
  }
}

/// Value blocks of kSlice columns covering dv (the last one partial when kSlice does not divide dv).
__host__ __device__ __forceinline__ int valueBlocks(int dv) { return (dv + kSlice - 1) / kSlice; }
static_assert(kThreads == 256 && kC == 64 && kSlice == 64, "16 x 16 threads of 4 x 4 elements");

template <int DK>
__global__ void __launch_bounds__(kThreads) fixedDgScanKernel(const AddBwdParams<float> p,
                                                              double* __restrict__ part) {  // [N, H, blocks]
  using L = FixedDgSmem;
  extern __shared__ __align__(16) double smemd[];
  double* sQ = smemd + L::Q;
  double* sK = smemd + L::K;
  double* sdO = smemd + L::dO;
  double* sV = smemd + L::V;
  double* sB = smemd + L::Bc;
  double* sW = smemd + L::W;
  double* sF = smemd + L::F;
  double* sRed = smemd + L::Red;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, ti = tid >> 4, tj = tid & 15;
  const int nvb = valueBlocks(p.value_dim), ks = int(blockIdx.x) / nvb, vb = int(blockIdx.x) - ks * nvb;
  const int h = blockIdx.y, n = blockIdx.z, H = p.heads, dv = p.value_dim;
  const int c0 = ks * kSlice, v0 = vb * kSlice;
  const int vcols = dv - v0 < kSlice ? dv - v0 : kSlice;  // this block's columns inside dv
  int64_t bos, len, coff;
  seqInfo<kC>(p, n, bos, len, coff);
  const int64_t hbase = (int64_t(n) * H + h) * DK * dv + int64_t(c0) * dv + v0;  // [N, H, DK, dv]

  double S[4][4], Y[4][4];  // S_c, Y_c at (key row, value column) = (c0 + ti + 16 a, v0 + tj + 16 b)
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const bool col = tj + 16 * b < vcols;
      S[a][b] = p.h0 && col ? double(p.h0[hbase + int64_t(ti + 16 * a) * dv + tj + 16 * b]) : 0.0;
      Y[a][b] = 0.0;
    }
  double acc = 0.0;
  const double scale = p.scale;
  const int64_t nch = (len + kC - 1) / kC;
  for (int64_t ch = 0; ch < nch; ++ch) {
    const int64_t tk = bos + ch * kC;
    const int lc = int((len - ch * kC) < kC ? (len - ch * kC) : int64_t(kC));
    __syncthreads();  // previous chunk's reads done
    loadChunkF64(sQ, p.q + (tk * H + h) * DK + c0, int64_t(H) * DK, lc, kSlice);
    loadChunkF64(sK, p.k + (tk * H + h) * DK + c0, int64_t(H) * DK, lc, kSlice);
    loadChunkF64(sdO, p.d_o + (tk * H + h) * dv + v0, int64_t(H) * dv, lc, vcols);
    loadChunkF64(sV, p.v + (tk * H + h) * dv + v0, int64_t(H) * dv, lc, vcols);
    if (warp == 0) {
      const float g0 = lane < lc ? decayAt(p, tk + lane, h) : 0.f;
      const float g1 = lane + 32 < lc ? decayAt(p, tk + lane + 32, h) : 0.f;
      double b0, b1, blast;
      chunkCumsum(g0, g1, b0, b1, blast);
      sB[lane] = b0;
      sB[lane + 32] = b1;
      sW[lane] = scale * exp(b0);
      sW[lane + 32] = scale * exp(b1);
      sF[lane] = exp(blast - b0);
      sF[lane + 32] = exp(blast - b1);
    }
    __syncthreads();
    // Pair terms at (t, s) = (ti + 16 a, tj + 16 b): x = do_t . v_s over the value block,
    // y = q_t . k_s over the key slice.
    {
      double x[4][4] = {}, y[4][4] = {};
      for (int j = 0; j < kSlice; ++j) {
        double oa[4], vs[4], qa[4], ksb[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          oa[a] = sdO[(ti + 16 * a) * L::LD + j];
          vs[a] = sV[(tj + 16 * a) * L::LD + j];
          qa[a] = sQ[(ti + 16 * a) * L::LD + j];
          ksb[a] = sK[(tj + 16 * a) * L::LD + j];
        }
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            x[a][b] = fma(oa[a], vs[b], x[a][b]);
            y[a][b] = fma(qa[a], ksb[b], y[a][b]);
          }
      }
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int t = ti + 16 * a, s = tj + 16 * b;
          if (s < t) acc += double(t - s) * scale * exp(sB[t] - sB[s]) * x[a][b] * y[a][b];
        }
    }
    // Readout terms with S_c, Y_c; then S_{c+1} = e_C S_c + sum_s F_s k_s v_s^T and
    // Y_{c+1} = e_C (Y_c + lc S_c) + sum_s (lc - 1 - s) F_s k_s v_s^T.
    const double ec = exp(sB[kC - 1]);  // exp(b_C): padded tokens have g = 0
    double Sn[4][4], Yn[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        Sn[a][b] = ec * S[a][b];
        Yn[a][b] = ec * fma(double(lc), S[a][b], Y[a][b]);
      }
    for (int t = 0; t < lc; ++t) {
      double qa[4], ka[4], ob[4], vb4[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        qa[a] = sQ[t * L::LD + ti + 16 * a];
        ka[a] = sK[t * L::LD + ti + 16 * a];
        ob[a] = sdO[t * L::LD + tj + 16 * a];
        vb4[a] = sV[t * L::LD + tj + 16 * a];
      }
      const double f = sF[t], be = double(lc - 1 - t) * f, tw = double(t + 1);
      double r = 0.0;
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        double in = 0.0;
#pragma unroll
        for (int b = 0; b < 4; ++b) in = fma(ob[b], fma(tw, S[a][b], Y[a][b]), in);
        r = fma(qa[a], in, r);
        const double fk = f * ka[a], bk = be * ka[a];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          Sn[a][b] = fma(fk, vb4[b], Sn[a][b]);
          Yn[a][b] = fma(bk, vb4[b], Yn[a][b]);
        }
      }
      acc = fma(sW[t], r, acc);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        S[a][b] = Sn[a][b];
        Y[a][b] = Yn[a][b];
      }
  }
  if (p.d_ht)
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b)
        if (tj + 16 * b < vcols)
          acc = fma(Y[a][b], double(p.d_ht[hbase + int64_t(ti + 16 * a) * dv + tj + 16 * b]), acc);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) sRed[warp] = acc;
  __syncthreads();
  if (tid == 0) {
    double a = 0.0;
    for (int i = 0; i < kWarps; ++i) a += sRed[i];
    part[(int64_t(n) * H + h) * gridDim.x + blockIdx.x] = a;
  }
}

/// d_g[h] = the sum over sequences and (key slice, value block) parts of fixedDgScanKernel, in
/// double and a fixed order (deterministic).
__global__ void fixedDgScanReduceKernel(const double* __restrict__ part,  // [N, H, blocks]
                                        int N, int H, int blocks, float* __restrict__ dg) {  // [H]
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= H) return;
  double a = 0.0;
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < blocks; ++i) a += part[(int64_t(n) * H + h) * blocks + i];
  dg[h] = float(a);
}

template <int DK>
void launchScan(const AddBwdParams<float>& p, double* part, cudaStream_t stream) {
  const int nks = DK / kSlice, nvb = valueBlocks(p.value_dim);
  auto kernel = fixedDgScanKernel<DK>;
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(FixedDgSmem::bytes)));
  kernel<<<dim3(nks * nvb, p.heads, p.num_seqs), kThreads, FixedDgSmem::bytes, stream>>>(p, part);
  LINAC_CUDA_CHECK_LAUNCH("fixedDgScanKernel");
}

/// Parts per (sequence, head) of fixedDgScanKernel: dk / kSlice key slices x ceil(dv / kSlice)
/// value blocks.
int fixedDgScanParts(int dk, int dv) { return dk / kSlice * valueBlocks(dv); }

/// d_g [H]: fixedDgScanKernel over every (key slice, value block, head, sequence) into part [N, H,
/// fixedDgScanParts(dk, dv)] (doubles), then their sum per head in a fixed order.
void launchFixedDgScan(const AddBwdParams<float>& p, int dk, double* part, float* dg, cudaStream_t stream) {
  switch (dk) {
    case 64: launchScan<64>(p, part, stream); break;
    case 128: launchScan<128>(p, part, stream); break;
    case 256: launchScan<256>(p, part, stream); break;
    default: LINAC_REQUIRE(false, "launchFixedDgScan: dk must be 64, 128 or 256, got " + std::to_string(dk));
  }
  const int H = p.heads, blocks = fixedDgScanParts(dk, p.value_dim);
  fixedDgScanReduceKernel<<<(H + kReduceThreads - 1) / kReduceThreads, kReduceThreads, 0, stream>>>(
      part, p.num_seqs, H, blocks, dg);
  LINAC_CUDA_CHECK_LAUNCH("fixedDgScanReduceKernel");
}

}  // namespace

void fixedClassDgFromInputs(const RecurrenceShape& s, const RecurrenceBackwardArgs& a, int N, cudaStream_t stream) {
  const int H = int(s.heads), dv = int(s.value_dim), dk = int(s.key_dim);
  const Workspace workspace(size_t(N) * H * fixedDgScanParts(dk, dv) * sizeof(double), stream);
  AddBwdParams<float> p{};
  p.q = static_cast<const float*>(a.fwd.q);
  p.k = static_cast<const float*>(a.fwd.k);
  p.v = static_cast<const float*>(a.fwd.v);
  p.d_o = static_cast<const float*>(a.d_o);
  p.g = a.fwd.g;
  p.h0 = a.fwd.h0;
  p.d_ht = a.d_ht;
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.chunks_per_seq = s.seq_len > 0 ? (s.seq_len + kC - 1) / kC : 1;
  p.num_seqs = N;
  p.heads = H;
  p.value_dim = dv;
  p.scale = a.fwd.scale;
  p.decay = int(DecayClass::Fixed);
  launchFixedDgScan(p, dk, reinterpret_cast<double*>(workspace.data()), a.d_g, stream);
}

}  // namespace linac::kernels::cuda
