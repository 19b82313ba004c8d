// chunkBackward: exact backward of the matrix-state recurrence (recurrence.h), correct-first.
//
// Algorithm (the CPU backward's, runtime/kernels/cpu/chunk_backward.cpp, mapped onto warps):
// every value column e of the state evolves independently of the others (the delta rule's
// w = S'^T k and every other coupling is a sum over key rows c only), and so does its adjoint. A
// warp owns NC = 2 value columns of one (sequence, head) and all dk key rows (lane l holds rows
// c = l + 32 r, r < R = dk / 32), so every reduction the recurrence itself needs (over c) is a
// warp shuffle and no state crosses warps. Gradients that sum over columns (dq, dk, dg, dbeta)
// are reduced per CTA in shared memory and then across the CTAs of a head with fp32 atomics.
//
//   pass 1  bwdCheckpointKernel: token-by-token forward, writes the state at every chunk start
//           (C = 64 tokens; 32 for dk = 256) to ckpt [chunks, H, dk, dv] fp32.
//   pass 2  bwdKernel: chunks last to first, carrying dS (registers). Per chunk: re-run the
//           forward from the chunk checkpoint keeping a sub-checkpoint every CK tokens
//           (CK * R = 32) in shared memory; per sub-block (last first) rebuild its CK per-token
//           states S_{t-1} in registers, then apply the exact adjoint of each token, last first.
//   pass 3  convert fp32 dq / dk to the element type; sum the fixed-class dg and d_u partials
//           (written per (sequence, head, value block)) in a fixed order, in double.
// Cost: ~3 token steps of O(dk dv) per token, no tensor cores: slow but exact for every kind.
// Determinism: dv, dh0, d_u, fixed dg are deterministic; dq, dk, scalar / diagonal dg and dbeta
// sum float partials with atomics (order may vary at the rounding level between runs), which
// chunkBackwardAtomics reports for torch's deterministic mode (the other paths use no atomics).
#include "chunk_backward_paths.h"
#include "cuda_check.h"
#include "cuda_kernels.h"
#ifdef LINAC_HAVE_HOPPER
#include "hopper/hopper_backward.h"
#endif
#include "tile.cuh"
#include "workspace.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

namespace linac::kernels::cuda {
namespace {

constexpr int kBwdWarps = 8;
constexpr int kBwdThreads = kBwdWarps * 32;
constexpr int kNC = 2;                      // value columns per warp
constexpr int kBV = kBwdWarps * kNC;        // value columns per CTA

template <int DK>
struct BwdCfg {
  static constexpr int R = DK / 32;                 // key rows per lane
  static constexpr int CK = 32 / R;                 // tokens per sub-block (register states)
  static constexpr int C = DK <= 128 ? 64 : 32;     // checkpoint interval (chunk)
  static constexpr int NSUB = C / CK;
  static constexpr int SUB_FLOATS = NSUB * R * 32 * kNC;  // sub-checkpoints of one warp
  static constexpr size_t smem_bytes =
      size_t(kBwdWarps) * SUB_FLOATS * 4 + size_t(3 * CK * DK + CK) * 4;
};

template <typename T>
struct BwdParams {
  const T* q;
  const T* k;
  const T* v;
  const T* d_o;
  const float* g;
  const float* beta;
  const float* u;
  const float* h0;
  const float* d_ht;
  float* ckpt;        // [chunks, H, DK, dv]
  float* dq;          // fp32 [B*T*H, DK], zeroed, or null
  float* dk;          // fp32 [B*T*H, DK], zeroed, or null
  T* dv;              // [B*T*H, dv] or null
  float* dg;          // Scalar [B*T*H] / Diagonal [B*T*H, DK], zeroed, or null (Fixed: see dgfix)
  float* dbeta;       // [B*T*H], zeroed, or null
  float* dh0;         // [N, H, DK, dv] or null
  double* dgfix;      // [N, H, nvb] Fixed-class partials, or null
  float* du;          // [N, H, nvb, DK] partials, or null
  const int64_t* cu_seqlens;
  int64_t seq_len;
  int heads;
  int value_dim;
  float scale;
  int decay;
  int delta;
  int excl;
};

template <int C>
__device__ __forceinline__ void seqInfo(const int64_t* cu, int64_t seq_len, int n, int64_t& bos,
                                        int64_t& len, int64_t& coff) {
  if (cu) {
    bos = cu[n];
    len = cu[n + 1] - bos;
    coff = bos / C + n;  // disjoint chunk ranges per sequence (see launcher)
  } else {
    bos = int64_t(n) * seq_len;
    len = seq_len;
    coff = int64_t(n) * ((seq_len + C - 1) / C);
  }
}

__device__ __forceinline__ float warpSum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

/// Inputs of one token that the forward step needs, for this lane's rows and warp's columns.
template <typename T, int R>
struct TokIn {
  float k[R], lam[R];
  float v[kNC];
  float beta;
  __device__ __forceinline__ void load(const BwdParams<T>& p, int64_t th, int lane, int e0,
                                       float gfix) {
    constexpr int DK = R * 32;
    const int dv = p.value_dim;
#pragma unroll
    for (int r = 0; r < R; ++r) k[r] = tile::toF32<T>(p.k[th * DK + lane + 32 * r]);
    float gs = 0.f;
    if (p.decay == int(DecayClass::Fixed)) gs = gfix;
    else if (p.decay == int(DecayClass::Scalar)) gs = p.g[th];
#pragma unroll
    for (int r = 0; r < R; ++r)
      lam[r] = expf(p.decay == int(DecayClass::Diagonal) ? p.g[th * DK + lane + 32 * r] : gs);
#pragma unroll
    for (int j = 0; j < kNC; ++j) v[j] = tile::toF32<T>(p.v[th * dv + e0 + j]);
    beta = p.delta ? p.beta[th] : 0.f;
  }
};

/// S <- S_t from S_{t-1} (one token of recurrence.h), for this warp's columns.
template <typename T, int R>
__device__ __forceinline__ void fwdStep(float (&S)[R][kNC], const TokIn<T, R>& x, bool delta) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < kNC; ++j) S[r][j] *= x.lam[r];
  float xw[kNC];
#pragma unroll
  for (int j = 0; j < kNC; ++j) xw[j] = x.v[j];
  if (delta) {
#pragma unroll
    for (int j = 0; j < kNC; ++j) {
      float w = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) w += x.k[r] * S[r][j];
      w = warpSum(w);
      xw[j] = x.beta * (x.v[j] - w);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < kNC; ++j) S[r][j] += x.k[r] * xw[j];
}

template <typename T, int DK>
__global__ void __launch_bounds__(kBwdThreads) bwdCheckpointKernel(const BwdParams<T> p) {
  using Cfg = BwdCfg<DK>;
  constexpr int R = Cfg::R, C = Cfg::C;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y, n = blockIdx.z, H = p.heads, dv = p.value_dim;
  const int e0 = blockIdx.x * kBV + warp * kNC;
  int64_t bos, len, coff;
  seqInfo<C>(p.cu_seqlens, p.seq_len, n, bos, len, coff);
  const float gfix = p.decay == int(DecayClass::Fixed) ? p.g[h] : 0.f;
  const bool delta = p.delta != 0;

  float S[R][kNC];
  const int64_t sbase = (int64_t(n) * H + h) * DK * dv;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < kNC; ++j)
      S[r][j] = p.h0 ? p.h0[sbase + int64_t(lane + 32 * r) * dv + e0 + j] : 0.f;

  TokIn<T, R> cur, nxt;
  if (len > 0) cur.load(p, bos * H + h, lane, e0, gfix);
  for (int64_t t = 0; t < len; ++t) {
    if (t % C == 0) {
      float* dst = p.ckpt + ((coff + t / C) * H + h) * int64_t(DK) * dv;
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < kNC; ++j) dst[int64_t(lane + 32 * r) * dv + e0 + j] = S[r][j];
    }
    if (t + 1 < len) nxt.load(p, (bos + t + 1) * H + h, lane, e0, gfix);
    fwdStep<T, R>(S, cur, delta);
    cur = nxt;
  }
}

template <typename T, int DK>
__global__ void __launch_bounds__(kBwdThreads) bwdKernel(const BwdParams<T> p) {
  using Cfg = BwdCfg<DK>;
  constexpr int R = Cfg::R, C = Cfg::C, CK = Cfg::CK;
  extern __shared__ __align__(16) float smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
  const int vb = blockIdx.x, h = blockIdx.y, n = blockIdx.z, H = p.heads, dv = p.value_dim;
  const int nvb = gridDim.x;
  const int e0 = vb * kBV + warp * kNC;
  float* sSub = smem + warp * Cfg::SUB_FLOATS;              // [NSUB][R][32][kNC]
  float* sDq = smem + kBwdWarps * Cfg::SUB_FLOATS;          // [CK][DK]
  float* sDk = sDq + CK * DK;                               // [CK][DK]
  float* sDg = sDk + CK * DK;                               // [CK][DK] (Scalar: [CK][0])
  float* sDb = sDg + CK * DK;                               // [CK]
  for (int i = tid; i < 3 * CK * DK + CK; i += kBwdThreads) sDq[i] = 0.f;

  int64_t bos, len, coff;
  seqInfo<C>(p.cu_seqlens, p.seq_len, n, bos, len, coff);
  const float gfix = p.decay == int(DecayClass::Fixed) ? p.g[h] : 0.f;
  const bool delta = p.delta != 0, excl = p.excl != 0;
  const bool diag = p.decay == int(DecayClass::Diagonal);
  const bool fixed = p.decay == int(DecayClass::Fixed);
  const float scale = p.scale;

  float dS[R][kNC];
  const int64_t sbase = (int64_t(n) * H + h) * DK * dv;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < kNC; ++j)
      dS[r][j] = p.d_ht ? p.d_ht[sbase + int64_t(lane + 32 * r) * dv + e0 + j] : 0.f;
  float du_acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) du_acc[r] = 0.f;
  double dgf = 0.0;
  float u_r[R];
#pragma unroll
  for (int r = 0; r < R; ++r) u_r[r] = excl ? p.u[h * DK + lane + 32 * r] : 0.f;
  __syncthreads();

  const int64_t nchunks = (len + C - 1) / C;
  for (int64_t ch = nchunks - 1; ch >= 0; --ch) {
    const int64_t c0 = ch * C;
    const int Lc = int((len - c0) < C ? (len - c0) : int64_t(C));
    const int nsb = (Lc + CK - 1) / CK;
    // Sub-checkpoints: S before tokens c0 + sb * CK.
    {
      float S[R][kNC];
      const float* src = p.ckpt + ((coff + ch) * H + h) * int64_t(DK) * dv;
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < kNC; ++j) S[r][j] = src[int64_t(lane + 32 * r) * dv + e0 + j];
      for (int sb = 0; sb < nsb; ++sb) {
        float* d = sSub + sb * (R * 32 * kNC);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int j = 0; j < kNC; ++j) d[(r * 32 + lane) * kNC + j] = S[r][j];
        if (sb + 1 < nsb) {
#pragma unroll
          for (int i = 0; i < CK; ++i) {
            TokIn<T, R> x;
            x.load(p, (bos + c0 + sb * CK + i) * H + h, lane, e0, gfix);
            fwdStep<T, R>(S, x, delta);
          }
        }
      }
    }
    for (int sb = nsb - 1; sb >= 0; --sb) {
      const int t0 = sb * CK;                      // within the chunk
      const int nt = (Lc - t0) < CK ? (Lc - t0) : CK;  // valid tokens in this sub-block
      // Per-token states P[i] = S_{t-1} of token t0 + i.
      float P[CK][R][kNC];
      {
        const float* s = sSub + sb * (R * 32 * kNC);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int j = 0; j < kNC; ++j) P[0][r][j] = s[(r * 32 + lane) * kNC + j];
#pragma unroll
        for (int i = 1; i < CK; ++i) {
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int j = 0; j < kNC; ++j) P[i][r][j] = P[i - 1][r][j];
          if (i < nt) {
            TokIn<T, R> x;
            x.load(p, (bos + c0 + t0 + i - 1) * H + h, lane, e0, gfix);
            fwdStep<T, R>(P[i], x, delta);
          }
        }
      }
      // Token adjoints, last first.
#pragma unroll
      for (int i = CK - 1; i >= 0; --i) {
        if (i >= nt) continue;
        const int64_t th = (bos + c0 + t0 + i) * H + h;
        TokIn<T, R> x;
        x.load(p, th, lane, e0, gfix);
        float q[R], dO[kNC];
#pragma unroll
        for (int r = 0; r < R; ++r) q[r] = tile::toF32<T>(p.q[th * DK + lane + 32 * r]);
#pragma unroll
        for (int j = 0; j < kNC; ++j) dO[j] = tile::toF32<T>(p.d_o[th * dv + e0 + j]);
        float Pp[R][kNC];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int j = 0; j < kNC; ++j) Pp[r][j] = x.lam[r] * P[i][r][j];
        float res[kNC], xw[kNC];
#pragma unroll
        for (int j = 0; j < kNC; ++j) {
          res[j] = x.v[j];
          if (delta) {
            float w = 0.f;
#pragma unroll
            for (int r = 0; r < R; ++r) w += x.k[r] * Pp[r][j];
            res[j] -= warpSum(w);
          }
          xw[j] = delta ? x.beta * res[j] : x.v[j];
        }
        float dqp[R], dkp[R], dvv[kNC];
        if (!excl) {
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float acc = 0.f;
#pragma unroll
            for (int j = 0; j < kNC; ++j) {
              acc += (Pp[r][j] + x.k[r] * xw[j]) * dO[j];
              dS[r][j] += scale * q[r] * dO[j];
            }
            dqp[r] = scale * acc;
            dkp[r] = 0.f;
          }
#pragma unroll
          for (int j = 0; j < kNC; ++j) dvv[j] = 0.f;
        } else {
          float vdo = 0.f;
#pragma unroll
          for (int j = 0; j < kNC; ++j) vdo += x.v[j] * dO[j];
          float bon = 0.f;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float acc = 0.f;
#pragma unroll
            for (int j = 0; j < kNC; ++j) acc += P[i][r][j] * dO[j];
            dqp[r] = scale * (acc + vdo * u_r[r] * x.k[r]);
            dkp[r] = scale * vdo * q[r] * u_r[r];
            du_acc[r] += scale * vdo * q[r] * x.k[r];
            bon += q[r] * u_r[r] * x.k[r];
          }
          bon = warpSum(bon);
#pragma unroll
          for (int j = 0; j < kNC; ++j) dvv[j] = scale * bon * dO[j];
        }
        // Update adjoint.
        float dxw[kNC];
#pragma unroll
        for (int j = 0; j < kNC; ++j) {
          float a = 0.f;
#pragma unroll
          for (int r = 0; r < R; ++r) a += dS[r][j] * x.k[r];
          dxw[j] = warpSum(a);
        }
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int j = 0; j < kNC; ++j) dkp[r] += dS[r][j] * xw[j];
        float dbp = 0.f;
        if (delta) {
#pragma unroll
          for (int j = 0; j < kNC; ++j) {
            dbp += dxw[j] * res[j];
            dvv[j] += x.beta * dxw[j];
            const float dw = -x.beta * dxw[j];
#pragma unroll
            for (int r = 0; r < R; ++r) {
              dkp[r] += Pp[r][j] * dw;
              dS[r][j] += x.k[r] * dw;
            }
          }
        } else {
#pragma unroll
          for (int j = 0; j < kNC; ++j) dvv[j] += dxw[j];
        }
        // Decay adjoint. The fixed class sums dg over every token, row and column, where the
        // total can be far smaller than its terms: there, lam * sum(P dS) is formed in double.
        float dgp[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float a = 0.f;
          double ad = 0.0;
#pragma unroll
          for (int j = 0; j < kNC; ++j) {
            a += Pp[r][j] * dS[r][j];
            if (fixed) ad += double(P[i][r][j]) * double(dS[r][j]);
            dS[r][j] *= x.lam[r];
            if (excl) dS[r][j] += scale * q[r] * dO[j];
          }
          dgp[r] = a;
          if (fixed) dgf += double(x.lam[r]) * ad;
        }
        // Outputs and partial sums.
        if (p.dv && lane == 0) {
#pragma unroll
          for (int j = 0; j < kNC; ++j) p.dv[th * dv + e0 + j] = tile::fromF32<T>(dvv[j]);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          atomicAdd(&sDq[i * DK + lane + 32 * r], dqp[r]);
          atomicAdd(&sDk[i * DK + lane + 32 * r], dkp[r]);
        }
        if (diag) {
#pragma unroll
          for (int r = 0; r < R; ++r) atomicAdd(&sDg[i * DK + lane + 32 * r], dgp[r]);
        } else if (p.decay == int(DecayClass::Scalar)) {
          float a = 0.f;
#pragma unroll
          for (int r = 0; r < R; ++r) a += dgp[r];
          a = warpSum(a);
          if (lane == 0) atomicAdd(&sDg[i * DK], a);
        }
        if (delta && lane == 0) atomicAdd(&sDb[i], dbp);
      }
      __syncthreads();
      // Flush the sub-block's column-summed partials to global memory.
      for (int idx = tid; idx < nt * DK; idx += kBwdThreads) {
        const int i = idx / DK, c = idx - i * DK;
        const int64_t th = (bos + c0 + t0 + i) * H + h;
        if (p.dq) atomicAdd(&p.dq[th * DK + c], sDq[idx]);
        if (p.dk) atomicAdd(&p.dk[th * DK + c], sDk[idx]);
        if (p.dg && diag) atomicAdd(&p.dg[th * DK + c], sDg[idx]);
        if (p.dg && c == 0 && p.decay == int(DecayClass::Scalar)) atomicAdd(&p.dg[th], sDg[idx]);
        if (p.dbeta && c == 0 && delta) atomicAdd(&p.dbeta[th], sDb[i]);
      }
      __syncthreads();
      for (int idx = tid; idx < 3 * CK * DK + CK; idx += kBwdThreads) sDq[idx] = 0.f;
      __syncthreads();
    }
  }

  if (p.dh0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < kNC; ++j) p.dh0[sbase + int64_t(lane + 32 * r) * dv + e0 + j] = dS[r][j];
  }
  // Deterministic per-CTA partials of d_u and the fixed-class dg (sSub is free now).
  if (p.du || p.dgfix) {
    __syncthreads();
    float* red = smem;  // [kBwdWarps][DK] floats, then [kBwdWarps] doubles
    double* redd = reinterpret_cast<double*>(smem + kBwdWarps * DK);
#pragma unroll
    for (int r = 0; r < R; ++r) red[warp * DK + lane + 32 * r] = du_acc[r];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dgf += __shfl_xor_sync(0xffffffffu, dgf, off);
    if (lane == 0) redd[warp] = dgf;
    __syncthreads();
    const int64_t part = (int64_t(n) * H + h) * nvb + vb;
    if (p.du)
      for (int c = tid; c < DK; c += kBwdThreads) {
        float a = 0.f;
        for (int w = 0; w < kBwdWarps; ++w) a += red[w * DK + c];
        p.du[part * DK + c] = a;
      }
    if (p.dgfix && tid == 0) {
      double a = 0.0;
      for (int w = 0; w < kBwdWarps; ++w) a += redd[w];
      p.dgfix[part] = a;
    }
  }
}

template <typename T>
__global__ void convertKernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = tile::fromF32<T>(src[i]);
}

/// d_u[h][c] = sum over (n, vb) of partials; d_g[h] (fixed) likewise. One thread per output.
__global__ void reducePartialsKernel(const float* __restrict__ du_part, float* __restrict__ du,
                                     const double* __restrict__ dg_part, float* __restrict__ dg,
                                     int N, int H, int nvb, int DK) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (du && i < H * DK) {
    const int h = i / DK, c = i - h * DK;
    double a = 0.0;
    for (int n = 0; n < N; ++n)
      for (int b = 0; b < nvb; ++b) a += du_part[((int64_t(n) * H + h) * nvb + b) * DK + c];
    du[i] = float(a);
  }
  if (dg && i < H) {
    double a = 0.0;
    for (int n = 0; n < N; ++n)
      for (int b = 0; b < nvb; ++b) a += dg_part[(int64_t(n) * H + i) * nvb + b];
    dg[i] = float(a);
  }
}

template <typename T, int DK>
void launchBwd(const RecurrenceKind& kind, const RecurrenceShape& s,
               const RecurrenceBackwardArgs& a, int N, cudaStream_t stream) {
  using Cfg = BwdCfg<DK>;
  constexpr int C = Cfg::C;
  const int H = int(s.heads), dv = int(s.value_dim);
  const int nvb = dv / kBV;
  const int64_t rows = s.batch * s.seq_len * H;  // token-heads
  const int64_t chunks = s.cu_seqlens ? (s.seq_len / C + N + 1)
                                      : int64_t(N) * ((s.seq_len + C - 1) / C);
  const bool f32 = std::is_same_v<T, float>;
  const bool want_dq = a.d_q != nullptr, want_dk = a.d_k != nullptr;

  // Workspace (stream-ordered, pooled by the driver after the first call).
  size_t off = 0;
  auto carve = [&](size_t bytes) { const size_t o = off; off += (bytes + 255) / 256 * 256; return o; };
  const size_t o_ckpt = carve(size_t(chunks > 0 ? chunks : 1) * H * DK * dv * 4);
  const size_t o_dq = (want_dq && !f32) ? carve(size_t(rows) * DK * 4) : 0;
  const size_t o_dk = (want_dk && !f32) ? carve(size_t(rows) * DK * 4) : 0;
  const bool want_du = kind.readout == Readout::ExclusiveBonus && a.d_u;
  // fp32 additive fixed class with an inclusive readout: d_g in double from the inputs
  // (fixedClassDgFromInputs) instead of from this kernel's fp32 states
  const bool scan_dg = f32 && kind.decay == DecayClass::Fixed && a.d_g && kind.update == UpdateRule::Additive &&
                       kind.readout == Readout::Inclusive;
  const bool want_dgfix = kind.decay == DecayClass::Fixed && a.d_g && !scan_dg;
  const size_t o_du = want_du ? carve(size_t(N) * H * nvb * DK * 4) : 0;
  const size_t o_dgf = want_dgfix ? carve(size_t(N) * H * nvb * 8) : 0;
  const Workspace workspace(off, stream);
  char* ws = reinterpret_cast<char*>(workspace.data());

  BwdParams<T> p{};
  p.q = static_cast<const T*>(a.fwd.q);
  p.k = static_cast<const T*>(a.fwd.k);
  p.v = static_cast<const T*>(a.fwd.v);
  p.d_o = static_cast<const T*>(a.d_o);
  p.g = a.fwd.g;
  p.beta = a.fwd.beta;
  p.u = a.fwd.u;
  p.h0 = a.fwd.h0;
  p.d_ht = a.d_ht;
  p.ckpt = reinterpret_cast<float*>(ws + o_ckpt);
  p.dq = want_dq ? (f32 ? static_cast<float*>(a.d_q) : reinterpret_cast<float*>(ws + o_dq)) : nullptr;
  p.dk = want_dk ? (f32 ? static_cast<float*>(a.d_k) : reinterpret_cast<float*>(ws + o_dk)) : nullptr;
  p.dv = static_cast<T*>(a.d_v);
  const bool per_token_dg = kind.decay == DecayClass::Scalar || kind.decay == DecayClass::Diagonal;
  p.dg = per_token_dg ? a.d_g : nullptr;
  p.dbeta = kind.update == UpdateRule::Delta ? a.d_beta : nullptr;
  p.dh0 = a.d_h0;
  p.dgfix = want_dgfix ? reinterpret_cast<double*>(ws + o_dgf) : nullptr;
  p.du = want_du ? reinterpret_cast<float*>(ws + o_du) : nullptr;
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.heads = H;
  p.value_dim = dv;
  p.scale = a.fwd.scale;
  p.decay = int(kind.decay);
  p.delta = kind.update == UpdateRule::Delta;
  p.excl = kind.readout == Readout::ExclusiveBonus;

  if (p.dq) LINAC_CUDA_CHECK(cudaMemsetAsync(p.dq, 0, size_t(rows) * DK * 4, stream));
  if (p.dk) LINAC_CUDA_CHECK(cudaMemsetAsync(p.dk, 0, size_t(rows) * DK * 4, stream));
  if (p.dg)
    LINAC_CUDA_CHECK(cudaMemsetAsync(
        p.dg, 0, size_t(rows) * (kind.decay == DecayClass::Diagonal ? DK : 1) * 4, stream));
  if (p.dbeta) LINAC_CUDA_CHECK(cudaMemsetAsync(p.dbeta, 0, size_t(rows) * 4, stream));

  const dim3 grid(nvb, H, N);
  bwdCheckpointKernel<T, DK><<<grid, kBwdThreads, 0, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("bwdCheckpointKernel");
  auto kernel = bwdKernel<T, DK>;
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(Cfg::smem_bytes)));
  kernel<<<grid, kBwdThreads, Cfg::smem_bytes, stream>>>(p);
  LINAC_CUDA_CHECK_LAUNCH("bwdKernel");

  if (!f32) {
    const int64_t n = rows * DK;
    const int blocks = int((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    if (want_dq && n > 0) {
      convertKernel<T><<<blocks, 256, 0, stream>>>(p.dq, static_cast<T*>(a.d_q), n);
      LINAC_CUDA_CHECK_LAUNCH("convertKernel");
    }
    if (want_dk && n > 0) {
      convertKernel<T><<<blocks, 256, 0, stream>>>(p.dk, static_cast<T*>(a.d_k), n);
      LINAC_CUDA_CHECK_LAUNCH("convertKernel");
    }
  }
  if (want_du || want_dgfix) {
    const int total = H * DK;
    reducePartialsKernel<<<(total + 127) / 128, 128, 0, stream>>>(
        p.du, want_du ? a.d_u : nullptr, p.dgfix, want_dgfix ? a.d_g : nullptr, N, H, nvb, DK);
    LINAC_CUDA_CHECK_LAUNCH("reducePartialsKernel");
  }
  if (scan_dg) fixedClassDgFromInputs(s, a, N, stream);
}

template <typename T>
void runBwd(const RecurrenceKind& kind, const RecurrenceShape& s, const RecurrenceBackwardArgs& a,
            int N, cudaStream_t stream) {
  switch (s.key_dim) {
    case 64: launchBwd<T, 64>(kind, s, a, N, stream); break;
    case 128: launchBwd<T, 128>(kind, s, a, N, stream); break;
    case 256: launchBwd<T, 256>(kind, s, a, N, stream); break;
    default:
      LINAC_REQUIRE(false, "chunkBackward: key_dim must be 64, 128 or 256, got " +
                               std::to_string(s.key_dim));
  }
}

/// The number of sequences (B, or the varlen count); validates what every path needs.
int64_t backwardSequences(const RecurrenceKind& kind, const RecurrenceShape& shape,
                          const RecurrenceBackwardArgs& args) {
  const auto& f = args.fwd;
  LINAC_REQUIRE(f.q && f.k && f.v && args.d_o, "chunkBackward: q, k, v, d_o are required");
  LINAC_REQUIRE(kind.decay == DecayClass::None || f.g,
                "chunkBackward: decay class needs g (log-decay)");
  LINAC_REQUIRE(kind.update != UpdateRule::Delta || f.beta, "chunkBackward: delta needs beta");
  LINAC_REQUIRE(kind.readout != Readout::ExclusiveBonus || f.u,
                "chunkBackward: exclusive_bonus needs u");
  LINAC_REQUIRE(shape.heads > 0 && shape.seq_len >= 0 && shape.batch >= 0,
                "chunkBackward: bad shape");
  LINAC_REQUIRE(shape.value_dim > 0 && shape.value_dim % kBV == 0,
                "chunkBackward: value_dim must be a positive multiple of " + std::to_string(kBV));
  int64_t num_seqs = shape.batch;
  if (shape.cu_seqlens) {
    LINAC_REQUIRE(shape.batch == 1, "chunkBackward: cu_seqlens needs batch == 1");
    LINAC_REQUIRE(shape.num_seqs > 0, "chunkBackward: cu_seqlens needs num_seqs > 0");
    num_seqs = shape.num_seqs;
  }
  LINAC_REQUIRE(num_seqs <= 65535 && shape.heads <= 65535, "chunkBackward: grid too large");
  return num_seqs;
}

/// The backward paths, in the order chunkBackward tries them.
enum class BackwardPath { Hopper, Additive, Diagonal, Delta, Exact };

BackwardPath chooseBackwardPath(const RecurrenceKind& kind, [[maybe_unused]] DType dtype,
                                const RecurrenceShape& shape, [[maybe_unused]] const RecurrenceBackwardArgs& args,
                                int64_t num_seqs) {
#ifdef LINAC_HAVE_HOPPER
  // The Hopper backward where it applies (hopper/hopper_backward.h; LINAC_HOPPER_BWD=0 turns it off).
  if (hopper::backwardSupported(kind, dtype, shape, args)) return BackwardPath::Hopper;
#endif
  // Additive rule, inclusive readout, scalar-or-coarser decay: tensor-core chunkwise path
  // (chunk_backward_additive.cu).
  if (additiveBackwardSupported(kind, shape) && 2 * num_seqs <= 65535) return BackwardPath::Additive;
  // Additive rule, diagonal (per key channel) decay, any readout: chunk_backward_diagonal.cu.
  if (diagonalBackwardSupported(kind, shape) && 2 * num_seqs <= 65535) return BackwardPath::Diagonal;
  // Delta rule, inclusive readout, decay none / fixed / scalar (DeltaNet, Gated DeltaNet):
  // chunk_backward_delta.cu (fla's WY-form backward on tensor cores).
  if (deltaBackwardSupported(kind, shape)) return BackwardPath::Delta;
  // Everything else: the exact per-token kernel above.
  return BackwardPath::Exact;
}

}  // namespace

void chunkBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                   const RecurrenceBackwardArgs& args, cudaStream_t stream) {
  const int64_t num_seqs = backwardSequences(kind, shape, args);
  if (num_seqs == 0) return;
  switch (chooseBackwardPath(kind, dtype, shape, args, num_seqs)) {
#ifdef LINAC_HAVE_HOPPER
    case BackwardPath::Hopper: hopper::backward(kind, dtype, shape, args, num_seqs, stream); return;
#else
    case BackwardPath::Hopper: break;
#endif
    case BackwardPath::Additive: additiveChunkBackward(kind, dtype, shape, args, int(num_seqs), stream); return;
    case BackwardPath::Diagonal: diagonalChunkBackward(kind, dtype, shape, args, int(num_seqs), stream); return;
    case BackwardPath::Delta: deltaChunkBackward(kind, dtype, shape, args, int(num_seqs), stream); return;
    case BackwardPath::Exact: break;
  }
  switch (dtype) {
    case DType::F32: runBwd<float>(kind, shape, args, int(num_seqs), stream); break;
    case DType::BF16: runBwd<__nv_bfloat16>(kind, shape, args, int(num_seqs), stream); break;
    case DType::F16: runBwd<__half>(kind, shape, args, int(num_seqs), stream); break;
  }
}

const char* chunkBackwardAtomics(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                                 const RecurrenceBackwardArgs& args) {
  const int64_t num_seqs = backwardSequences(kind, shape, args);
  if (num_seqs == 0) return nullptr;
  switch (chooseBackwardPath(kind, dtype, shape, args, num_seqs)) {
    case BackwardPath::Exact:
      return "the exact per-token backward (chunk_backward.cu: float atomics for d_q, d_k, d_g and d_beta)";
    default: return nullptr;  // every gradient written once, in a fixed order
  }
}

}  // namespace linac::kernels::cuda
