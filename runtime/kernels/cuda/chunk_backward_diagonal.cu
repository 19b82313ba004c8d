// Tensor-core chunkwise backward for the additive update rule with a DIAGONAL decay (one log-decay
// per key channel and token: GLA, HGRN-2, RWKV-6), readout Inclusive or ExclusiveBonus, following
// fla's chunk_gla backward. Other kinds use chunk_backward.cu (exact kernel) or
// chunk_backward_additive.cu (decay None / Fixed / Scalar).
//
// Semantics (recurrence.h), per sequence n and head h, g_t in R^dk (g <= 0):
//   S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T
//   inclusive:        o_t = scale S_t^T q_t
//   exclusive_bonus:  o_t = scale (S_{t-1}^T q_t + ((q_t * u * k_t) . 1) v_t),  u [H, dk]
// Chunks of C = 64 tokens; in a chunk (local tokens t = 0..C-1; padded ones have q = k = v = d_o = 0
// and g = 0) b_t = sum_{s <= t} g_s per channel (inclusive cumsum, in double), B = b_{C-1} (= b at the
// last valid token), bq_t = b_t (inclusive) or b_{t-1} with b_{-1} = 0 (exclusive). S_c is the state
// before chunk c, dS_{c+1} the loss gradient w.r.t. the state after it (terms of later chunks and
// d_ht). Every key row of the state evolves independently (diagonal decay, additive rule).
//
//   pass 1  diagStateScanKernel, one CTA per (value block of 64, head x key slice of 64,
//           sequence x direction), sequential over chunks:
//             forward:  S_0 = h0,   S_{c+1} = diag(e^B) S_c + (K . e^{B - b})^T V;    ws_S[c] = S_c
//             reverse:  dS_end = d_ht, dS_c = diag(e^B) dS_{c+1} + scale (Q . e^{bq})^T dO;
//                       ws_dS[c] = dS_{c+1};  d_h0 = dS_0
//   pass 2  diagDqdkKernel, one CTA per (chunk, head, key slice of 64), loop over value blocks:
//             D[t][s]  = scale (do_t . v_s)
//             dq_t[c]  = scale e^{bq_tc} (S_c do_t)[c] + sum_{s <=(<) t} D[t][s] k_sc e^{bq_tc - b_sc}
//             dk_s[c]  = e^{B_c - b_sc} (dS_{c+1} v_s)[c] + sum_{t >=(>) s} D[t][s] q_tc e^{bq_tc - b_sc}
//             exclusive: dq_t += D[t][t] u * k_t,  dk_t += D[t][t] u * q_t,
//                        d_u partial = sum_t D[t][t] q_t * k_t
//           and the chunk-local part of d_g (below).
//   pass 3  diagDvKernel, one CTA per (chunk, head, value block of 64), loop over key slices:
//             A[t][s]  = scale sum_c q_tc k_sc e^{bq_tc - b_sc}   (s <= t inclusive, s < t exclusive)
//             dv_s     = (K . e^{B - b})_s dS_{c+1} + sum_t A[t][s] do_t
//                        [+ scale (q_s . (u * k_s)) do_s exclusive]
//   pass 4  diagDuKernel sums d_u.
// Passes 1-3 run as Hopper stages instead (hopper/diag_state_scan.cuh: the state passes on wgmma;
// hopper/diag_grad.cuh: passes 2 and 3 as one stage, the same sums with the 16-token factorisation
// on the tensor cores) for bf16 / fp16 at dk, dv in {64, 128} on an H200, opt-in with
// LINAC_HOPPER_DIAG_BWD=1 until they have run there.
//
// d_g: dg_t = e^{g_t} <S_{t-1}, dS_t> per channel (the gradient through b), expanded over the chunk
// into straddling-pair terms only (as the additive path does for the scalar class):
//   dg_t = Z + sum_{t' >= t} X_t' + sum_{s < t} E_s  [- q_t . dq'_t  exclusive]
//   Z    = e^{B} <S_c, dS_{c+1}>              (pairs across the whole chunk, per channel)
//   X_t  = q_t . dq'_t - k_t . dk_intra_t      (dq' without the bonus term)
//   E_s  = k_s . dk_inter_s                    (dk_inter = the dS_{c+1} part of dk)
// Every term is chunk-local, so nothing is carried across chunks and the error does not grow with
// T. fla's form, dg_t = sum_{t' >= t} (q.dq - k.dk) + <ht, d_ht>, is a reverse cumsum over the whole
// sequence of nearly cancelling differences: a float32 emulation (and the H200) put its dg at
// 1.0e-5..1.6e-5 relative at dk = 256 from the products' rounding alone; this form gives ~1.5e-6.
//
// Numerics. b is non-increasing (g <= 0, fp32 rounding is monotone), so every exponent below is
// <= 0: strong gates (tests clamp g at -20 per token, b reaches -1280) underflow to 0, never to inf
// or NaN. The intra-chunk products split the chunk into 16-token sub-blocks: an off-diagonal pair
// factors e^{bq_t - b_s} = e^{bq_t - b_r} e^{b_r - b_s} with a reference token r between them
// (s <= r, bq_t <= b_r): r = 16 i - 1 for the dq rows of sub-block i (s < 16 i), r = 16 j + 15 for
// the dk / A rows of sub-block j (t >= 16 (j + 1)); diagonal sub-blocks are summed elementwise with
// one exponential per term, as in chunk_forward.cuh. The in-chunk cumsum is computed in the
// kernels (4 threads per channel, 16 tokens each) in double, so b = B exactly at the last token;
// pass 2 keeps b as two floats (hi = float(b), lo = float(b - hi)) and takes a difference as
// (hi_t - hi_s) + (lo_t - lo_s), exact to fp32 where it matters (with gates clamped at -20, b
// reaches -1280 in a chunk and fp32 b's alone put ~1e-5 into dg).
// Products run on tensor cores (mma.sync m16n8k8 tf32, fp32 accumulation). fp32 inputs use 3xTF32;
// bf16 / fp16 inputs use 1xTF32 (d_g's chunk-local form above needs no more).
// Every output is written by exactly one thread: deterministic, no atomics.
// Workspace (cudaMallocAsync): S and dS [slots, H, dk, dv] fp32 (the input dtype on the Hopper
// stages; slots ~ B T / C), d_u partials [slots, H, dk].
#include "chunk_backward_paths.h"
#include "chunk_slots.cuh"
#ifdef LINAC_HAVE_HOPPER
#include "hopper/hopper_backward.h"
#endif

#include "cuda_check.h"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

namespace linac::kernels::cuda {
namespace {

constexpr int kC = 64;                      // chunk length (tokens)
constexpr int kSlice = 64;                  // key slice / value block width
constexpr int kSub = 16;                    // sub-block length for decay reference points
constexpr int kNSub = kC / kSub;            // sub-blocks per chunk
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kNT = 4;                      // 8-column n-tiles per warp tile (16 x 32)
constexpr int kParts = kThreads / kSlice;   // threads per channel in the in-chunk cumsum
constexpr int kPartLen = kC / kParts;       // tokens per cumsum thread
constexpr int kReduceThreads = 128;
// Shared-memory leading dimensions (floats): an operand read as an A fragment element (m, k) =
// X[m * ld + k] or a transposed B element (k, n) = X[n * ld + k] is conflict-free with
// ld = 4 mod 32; a direct B element X[k * ld + n] (or A read as X[k * ld + m]) with ld = 8 mod 32.
constexpr int kLdA = kSlice + 4;            // 68
constexpr int kLdB = kSlice + 8;            // 72
static_assert(kC == kSlice, "D [C x C] aliases a state slice [kSlice x kSlice]");
static_assert(kParts * kPartLen == kC && kThreads % kSlice == 0, "cumsum thread layout");
static_assert(kWarps == (kC / 16) * (kSlice / (8 * kNT)), "one 16 x 32 tile per warp");
static_assert(kSub == 16, "sub-blocks are one mma row tile");

template <typename T>
struct DiagBwdParams {
  const T* q;              // [B, T, H, DK]
  const T* k;              // [B, T, H, DK]
  const T* v;              // [B, T, H, dv]
  const T* d_o;            // [B, T, H, dv]
  const float* g;          // [B, T, H, DK] log-decay
  const float* u;          // [H, DK] (exclusive) or null
  const float* h0;         // [N, H, DK, dv] or null
  const float* d_ht;       // [N, H, DK, dv] or null
  float* states;           // [slots, H, DK, dv] S_c (state before chunk c)
  float* dstates;          // [slots, H, DK, dv] dS_{c+1} (gradient after chunk c)
  T* dq;                   // [B, T, H, DK] or null
  T* dk;                   // [B, T, H, DK] or null
  T* dv;                   // [B, T, H, dv] or null
  float* dg;               // [B, T, H, DK] or null
  float* dh0;              // [N, H, DK, dv] or null
  float* du_part;          // [slots, H, DK] d_u partials (exclusive with d_u), or null
  const int64_t* cu_seqlens;  // [N + 1] device, or null
  int64_t seq_len;         // T
  int64_t chunks_per_seq;  // ceil(T / C) without cu_seqlens (>= 1)
  int num_seqs;            // N
  int heads;               // H
  int value_dim;           // dv
  float scale;
  int exclusive;           // Readout == ExclusiveBonus
};

/// Cumulative sum over the chunk's tokens of a [kC x kSlice] fp32 tile of log-decays in shared
/// memory (padded tokens hold 0), in double. Thread (column c = tid % kSlice, part = tid /
/// kSlice) owns tokens part * kPartLen .. + kPartLen - 1 of column c and calls
/// emit(t, c, b_t, b_{t-1}, B) for each (b_{-1} = 0, B = b_{C-1}, bit-identical to b at the last
/// token); emit may overwrite sG[t][c] (it is read before). sTot: [kParts * kSlice] doubles of
/// scratch. Callers __syncthreads() before (tile loaded) and after.
template <typename F>
__device__ __forceinline__ void channelCumsum(float* sG, int ld, double* sTot, F&& emit) {
  const int c = threadIdx.x % kSlice, part = threadIdx.x / kSlice, t0 = part * kPartLen;
  double acc = 0.0;
#pragma unroll
  for (int i = 0; i < kPartLen; ++i) acc += sG[(t0 + i) * ld + c];
  sTot[part * kSlice + c] = acc;
  __syncthreads();
  double prefix = 0.0, total = 0.0;
#pragma unroll
  for (int pp = 0; pp < kParts; ++pp) {
    const double x = sTot[pp * kSlice + c];
    if (pp < part) prefix = total + x;  // same summation order as total: prefix == b_{t0 - 1}
    total += x;
  }
  if (part == 0) prefix = 0.0;
  double loc = 0.0, prev = prefix;  // loc repeats acc's sums, so b at the last token == total
#pragma unroll
  for (int i = 0; i < kPartLen; ++i) {
    loc += sG[(t0 + i) * ld + c];
    const double b = prefix + loc;
    emit(t0 + i, c, b, prev, total);
    prev = b;
  }
}

/// f(row, col, x, y) over two accumulator tiles of the same shape and position.
template <int NT, typename F>
__device__ __forceinline__ void forEachAcc2(float (&a)[NT][4], float (&b)[NT][4], int m0, int n0,
                                            F&& f) {
  const tile::Lane ln;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      f(m0 + ln.g + ((e & 2) ? 8 : 0), n0 + 8 * j + 2 * ln.q + (e & 1), a[j][e], b[j][e]);
}


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

// ---- pass 2: dq, dk, chunk-local d_g, d_u partials per (chunk, head, key slice) ----------------
struct DqdkSmem {
  static constexpr int Q = 0;                    // [C, kLdB]   q slice
  static constexpr int K = Q + kC * kLdB;        // [C, kLdB]   k slice
  static constexpr int dO = K + kC * kLdB;       // [C, kLdA]   d_o value block (A operand)
  static constexpr int V = dO + kC * kLdA;       // [C, kLdA]   v value block (A and B^T)
  static constexpr int S = V + kC * kLdA;        // [kSlice, kLdA] S_c rows of the slice (B^T)
  static constexpr int dS = S + kSlice * kLdA;   // [kSlice, kLdA] dS_{c+1} rows of the slice
  static constexpr int Tot = dS + kSlice * kLdA; // [kParts * kSlice] doubles: cumsum scratch
  static constexpr int total = Tot + 2 * kParts * kSlice;
  // After the value loop (aliases of buffers the loop used):
  static constexpr int D = S;                    // [C, kLdA]   D = scale dO V^T (unmasked)
  static constexpr int Bhi = dO;                 // [C, kLdA]   b of the slice: float(b)
  static constexpr int Blo = V;                  // [C, kLdA]   float(b - hi)
  static constexpr int Ki = dS;                  // [C, kLdA]   dk_inter (d_g only)
  // After the intra-chunk parts (the b tiles are free again):
  static constexpr int X = dO;                   // [C, kLdA]   X_t = q.dq' - k.dk_intra
  static constexpr int Y = V;                    // [C, kLdA]   q . dq' (exclusive)
  static constexpr size_t bytes = size_t(total) * sizeof(float);
};
static_assert(DqdkSmem::S % 4 == 0 && DqdkSmem::dS % 4 == 0 && kLdA % 4 == 0,
              "cp.async destinations must be 16-byte aligned");
static_assert(DqdkSmem::Tot % 2 == 0, "double scratch must be 8-byte aligned");

template <typename T, int DK, bool Precise>
__global__ void __launch_bounds__(kThreads, 2) diagDqdkKernel(const DiagBwdParams<T> p) {
  using namespace tile;
  using L = DqdkSmem;
  extern __shared__ __align__(16) float smem[];
  float* sQ = smem + L::Q;
  float* sK = smem + L::K;
  float* sdO = smem + L::dO;
  float* sV = smem + L::V;
  float* sS = smem + L::S;
  float* sdS = smem + L::dS;
  double* sTot = reinterpret_cast<double*>(smem + L::Tot);
  float* sD = smem + L::D;
  float* sBhi = smem + L::Bhi;
  float* sBlo = smem + L::Blo;
  float* sKi = smem + L::Ki;
  float* sX = smem + L::X;
  float* sY = smem + L::Y;

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<kC>(p, blockIdx.x, n, bos, len, chunk, coff)) return;  // whole CTA, before barriers
  const int tid = threadIdx.x, warp = tid >> 5;
  const int h = blockIdx.y, ks = blockIdx.z, c0 = ks * kSlice;
  const int H = p.heads, dv = p.value_dim;
  const bool excl = p.exclusive != 0;
  const int64_t tok0 = bos + chunk * kC;
  const int lc = int((len - chunk * kC) < kC ? (len - chunk * kC) : int64_t(kC));
  const int64_t sbase = ((coff + chunk) * H + h) * int64_t(DK) * dv + int64_t(c0) * dv;

  loadRowsToShared<T>(sQ, kLdB, p.q + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
  loadRowsToShared<T>(sK, kLdB, p.k + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);

  // This warp's 16 x 32 tile of every C x 64 result: rows 16 mt.., columns n0..
  const int mt = warp >> 1, n0 = 8 * kNT * (warp & 1);
  float aq[kNT][4], ak[kNT][4], ad[kNT][4];
  zeroAcc(aq);
  zeroAcc(ak);
  zeroAcc(ad);
  const bool want_dg = p.dg != nullptr;
  float zdot = 0.f;  // thread c < kSlice (d_g): <S_c[c,:], dS_{c+1}[c,:]> over the value blocks
  for (int v0 = 0; v0 < dv; v0 += kSlice) {
    __syncthreads();  // previous block's reads done
    asyncLoadSquare<kThreads, kSlice>(sS, kLdA, p.states + sbase + v0, dv);  // overlaps the loads below
    asyncLoadSquare<kThreads, kSlice>(sdS, kLdA, p.dstates + sbase + v0, dv);
    loadRowsToShared<T>(sdO, kLdA, p.d_o + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    loadRowsToShared<T>(sV, kLdA, p.v + (tok0 * H + h) * dv + v0, int64_t(H) * dv, kC, lc, kSlice);
    asyncWaitAll();
    __syncthreads();
    // aq[t][c] += sum_j dO[t][j] S[c][j];  ak[s][c] += sum_j V[s][j] dS[c][j];
    // ad[t][s] += sum_j dO[t][j] V[s][j]
    warpTileProduct<kNT, Precise>(
        aq, 16 * mt, n0, kSlice, [&](int t, int j) { return sdO[t * kLdA + j]; },
        [&](int j, int c) { return sS[c * kLdA + j]; });
    warpTileProduct<kNT, Precise>(
        ak, 16 * mt, n0, kSlice, [&](int s, int j) { return sV[s * kLdA + j]; },
        [&](int j, int c) { return sdS[c * kLdA + j]; });
    warpTileProduct<kNT, Precise>(
        ad, 16 * mt, n0, kSlice, [&](int t, int j) { return sdO[t * kLdA + j]; },
        [&](int j, int s) { return sV[s * kLdA + j]; });
    if (want_dg && tid < kSlice)
      for (int j = 0; j < kSlice; ++j) zdot += sS[tid * kLdA + j] * sdS[tid * kLdA + j];
  }
  __syncthreads();  // every warp is done with sS / sdS / sdO / sV before their aliases are written
  loadRowsToShared<float>(sBhi, kLdA, p.g + (tok0 * H + h) * DK + c0, int64_t(H) * DK, kC, lc, kSlice);
  const float scale = p.scale;
  forEachAcc(ad, 16 * mt, n0, [&](int t, int s, float& x) { sD[t * kLdA + s] = scale * x; });
  __syncthreads();
  channelCumsum(sBhi, kLdA, sTot, [&](int t, int c, double bb, double, double) {
    const float hi = float(bb);
    sBhi[t * kLdA + c] = hi;
    sBlo[t * kLdA + c] = float(bb - double(hi));
  });
  __syncthreads();

  // Log-decays by token index i (-1: before the chunk, b = 0); qi(t) is the index bq_t reads.
  auto hi = [&](int i, int c) -> float { return i < 0 ? 0.f : sBhi[i * kLdA + c]; };
  auto lo = [&](int i, int c) -> float { return i < 0 ? 0.f : sBlo[i * kLdA + c]; };
  auto bAbs = [&](int i, int c) -> float { return hi(i, c) + lo(i, c); };
  auto bDiff = [&](int i, int j, int c) -> float { return (hi(i, c) - hi(j, c)) + (lo(i, c) - lo(j, c)); };
  auto qi = [&](int t) { return excl ? t - 1 : t; };
  const float zc = (want_dg && tid < kSlice) ? fastExp<Precise>(bAbs(kC - 1, tid)) * zdot : 0.f;  // Z
  // Inter-chunk parts; for d_g, dk_inter is parked in sKi and ak then collects the intra parts.
  forEachAcc(aq, 16 * mt, n0, [&](int t, int c, float& x) { x *= scale * fastExp<Precise>(bAbs(qi(t), c)); });
  forEachAcc(ak, 16 * mt, n0, [&](int s, int c, float& x) {
    x *= fastExp<Precise>(bDiff(kC - 1, s, c));
    if (want_dg) {
      sKi[s * kLdA + c] = x;
      x = 0.f;
    }
  });
  // Off-diagonal sub-blocks. dq rows t in sub-block mt, s < 16 mt, reference r = 16 mt - 1.
  if (mt > 0) {
    const int r = kSub * mt - 1;
    float acc[kNT][4];
    zeroAcc(acc);
    warpTileProduct<kNT, Precise>(
        acc, 16 * mt, n0, kSub * mt, [&](int t, int s) { return sD[t * kLdA + s]; },
        [&](int s, int c) { return sK[s * kLdB + c] * fastExp<Precise>(bDiff(r, s, c)); });
    forEachAcc2(aq, acc, 16 * mt, n0, [&](int t, int c, float& x, float& y) {
      x += fastExp<Precise>(bDiff(qi(t), r, c)) * y;
    });
  }
  // dk rows s in sub-block mt, t >= 16 (mt + 1), reference r = 16 mt + 15.
  if (mt < kNSub - 1) {
    const int r = kSub * mt + kSub - 1, t0 = kSub * (mt + 1);
    float acc[kNT][4];
    zeroAcc(acc);
    warpTileProduct<kNT, Precise>(
        acc, 16 * mt, n0, kC - t0, [&](int s, int kk) { return sD[(t0 + kk) * kLdA + s]; },
        [&](int kk, int c) {
          return sQ[(t0 + kk) * kLdB + c] * fastExp<Precise>(bDiff(qi(t0 + kk), r, c));
        });
    forEachAcc2(ak, acc, 16 * mt, n0, [&](int s, int c, float& x, float& y) {
      x += fastExp<Precise>(bDiff(r, s, c)) * y;
    });
  }
  // Diagonal sub-block (s <= t, s < t exclusive, inside sub-block mt) by decay chains: in a
  // channel, exp(bq_t - b_s) is the product of the per-token decays alpha_u = exp(b_u - b_{u-1})
  // between s and t, so one exponential per token and channel of the sub-block replaces one per
  // (t, s, channel). dq_t walks s downward from t, dk_s walks t upward from s. The walks cover the
  // whole sub-block under a predicate, so alpha's indices stay static (registers).
  const int blk0 = kSub * mt;
  const Lane ln;
  #pragma unroll
  for (int j = 0; j < kNT; ++j)
    #pragma unroll
    for (int e1 = 0; e1 < 2; ++e1) {
      const int c = n0 + 8 * j + 2 * ln.q + e1;  // the accumulators' column (forEachAcc's layout)
      float alpha[kSub];
      alpha[0] = 1.f;
      #pragma unroll
      for (int i = 1; i < kSub; ++i) alpha[i] = fastExp<Precise>(bDiff(blk0 + i, blk0 + i - 1, c));
      #pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
        const int i = ln.g + 8 * e2, t = blk0 + i;  // the accumulators' row
        const int top = excl ? i - 1 : i;           // dq_t: s from top down to the block start
        float xq = 0.f, f = 1.f;
        #pragma unroll
        for (int si = kSub - 1; si >= 0; --si)
          if (si <= top) {
            xq += sD[t * kLdA + blk0 + si] * sK[(blk0 + si) * kLdB + c] * f;
            f *= alpha[si];
          }
        aq[j][2 * e2 + e1] += xq;
        const int first = excl ? i + 1 : i;  // dk_s (s = t): t' from first up to the block end
        float xk = 0.f;
        f = 1.f;
        #pragma unroll
        for (int ti = 0; ti < kSub; ++ti)
          if (ti >= first) {
            if (ti > first) f *= excl ? alpha[ti > 0 ? ti - 1 : 0] : alpha[ti];
            xk += sD[(blk0 + ti) * kLdA + t] * sQ[(blk0 + ti) * kLdB + c] * f;
          }
        ak[j][2 * e2 + e1] += xk;
      }
    }
  // d_g staging (X, and q . dq' for the exclusive readout), dk = intra + inter, then the bonus
  // terms (which do not depend on g).
  if (want_dg) __syncthreads();  // every warp is done with the b tiles, which X and Y overwrite
  const float* u = excl ? p.u + int64_t(h) * DK + c0 : nullptr;
  forEachAcc2(aq, ak, 16 * mt, n0, [&](int t, int c, float& xq, float& xk) {
    const float qv = sQ[t * kLdB + c], kv = sK[t * kLdB + c];
    if (want_dg) {
      sX[t * kLdA + c] = qv * xq - kv * xk;
      if (excl) sY[t * kLdA + c] = qv * xq;
      xk += sKi[t * kLdA + c];
    }
    if (excl) {
      const float vdo = sD[t * kLdA + t];  // scale (v_t . do_t)
      xq += vdo * u[c] * kv;
      xk += vdo * u[c] * qv;
    }
  });
  if (p.dq) storeAcc<T, kNT>(p.dq + (tok0 * H + h) * DK + c0, int64_t(H) * DK, aq, 16 * mt, n0, lc, 1.f);
  if (p.dk) storeAcc<T, kNT>(p.dk + (tok0 * H + h) * DK + c0, int64_t(H) * DK, ak, 16 * mt, n0, lc, 1.f);
  if (want_dg || (excl && p.du_part)) {
    __syncthreads();  // sX, sY, sKi complete
    const int64_t slot = blockIdx.x;
    if (want_dg && tid < kSlice) {  // dg_t = Z + sum_{t' >= t} X_t' + sum_{s < t} E_s [- q_t.dq'_t]
      const int c = tid;
      float suffix = 0.f;
      for (int t = kC - 1; t >= 0; --t) {
        suffix += sX[t * kLdA + c];
        sX[t * kLdA + c] = suffix;
      }
      float prefix = 0.f;
      for (int t = 0; t < lc; ++t) {
        const float x = (zc + sX[t * kLdA + c]) + prefix;
        p.dg[((tok0 + t) * H + h) * DK + c0 + c] = excl ? x - sY[t * kLdA + c] : x;
        prefix += sK[t * kLdB + c] * sKi[t * kLdA + c];  // E_t
      }
    } else if (excl && p.du_part && tid >= kSlice && tid < 2 * kSlice) {
      const int c = tid - kSlice;
      float acc = 0.f;
      for (int t = 0; t < lc; ++t) acc += sD[t * kLdA + t] * sQ[t * kLdB + c] * sK[t * kLdB + c];
      p.du_part[(slot * H + h) * DK + c0 + c] = acc;
    }
  }
}

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

// ---- pass 4: d_u reduction ------------------------------------------------------------------
/// d_u[h][c] = sum over chunk slots of the partials (zeroed where no chunk wrote), in double.
__global__ void diagDuKernel(const float* __restrict__ du_part, float* __restrict__ du,
                             int64_t slots, int H, int DK) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= H * DK) return;
  double a = 0.0;
  for (int64_t s = 0; s < slots; ++s) a += du_part[s * H * DK + i];
  du[i] = float(a);
}

// ---- host ---------------------------------------------------------------------------------------
template <typename K>
void setSmem(K kernel, size_t bytes) {
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(bytes)));
}

template <typename T, int DK>
void launchDiagBwd(const RecurrenceKind& kind, const RecurrenceShape& s,
                   const RecurrenceBackwardArgs& a, int N, cudaStream_t stream) {
  // 3xTF32 where the inputs are fp32; 16-bit inputs take 1xTF32 in every pass, d_g included: its
  // chunk-local form (header) leaves no long cancelling sum for the products' rounding to grow in.
  constexpr bool kF32 = std::is_same_v<T, float>;
  constexpr bool PreciseState = kF32;  // passes 1, 2
  constexpr bool PreciseDv = kF32;     // pass 3
  const int H = int(s.heads), dv = int(s.value_dim);
  const int nvb = dv / kSlice, nks = DK / kSlice;
  const bool varlen = s.cu_seqlens != nullptr;
  const bool excl = kind.readout == Readout::ExclusiveBonus;
  const int64_t chunks_per_seq = (s.seq_len + kC - 1) / kC;
  const int64_t slots = varlen ? s.seq_len / kC + N + 1 : int64_t(N) * chunks_per_seq;
  const bool want_dg = a.d_g != nullptr;
  const bool want_du = excl && a.d_u != nullptr;
  LINAC_REQUIRE(int64_t(H) * nks <= 65535,
                "diagonalChunkBackward: heads * key_dim / 64 must be <= 65535, got " +
                    std::to_string(int64_t(H) * nks));

  // passes 1-3 on the Hopper stages (hopper/diag_state_scan.cuh, hopper/diag_grad.cuh) where they
  // take the call; their state workspaces hold the input dtype
  bool hopper = false;
#ifdef LINAC_HAVE_HOPPER
  DType dtype = DType::F32;
  if constexpr (!kF32) {
    dtype = std::is_same_v<T, __half> ? DType::F16 : DType::BF16;
    hopper = hopper::diagonalGradSupported(dtype, s);
  }
#endif

  size_t off = 0;
  auto carve = [&](size_t bytes) {
    const size_t o = off;
    off += (bytes + 255) / 256 * 256;
    return o;
  };
  const size_t state_bytes = size_t(slots) * H * DK * dv * (hopper ? sizeof(T) : sizeof(float));
  const size_t chunk_vec_bytes = size_t(slots > 0 ? slots : 1) * H * DK * sizeof(float);
  const size_t o_s = carve(state_bytes > 0 ? state_bytes : 1);
  const size_t o_ds = carve(state_bytes > 0 ? state_bytes : 1);
  const size_t o_du = want_du ? carve(chunk_vec_bytes) : 0;
  char* ws = nullptr;
  LINAC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&ws), off, stream));

  DiagBwdParams<T> p{};
  p.q = static_cast<const T*>(a.fwd.q);
  p.k = static_cast<const T*>(a.fwd.k);
  p.v = static_cast<const T*>(a.fwd.v);
  p.d_o = static_cast<const T*>(a.d_o);
  p.g = a.fwd.g;
  p.u = excl ? a.fwd.u : nullptr;
  p.h0 = a.fwd.h0;
  p.d_ht = a.d_ht;
  p.states = reinterpret_cast<float*>(ws + o_s);
  p.dstates = reinterpret_cast<float*>(ws + o_ds);
  p.dq = static_cast<T*>(a.d_q);
  p.dk = static_cast<T*>(a.d_k);
  p.dv = static_cast<T*>(a.d_v);
  p.dg = a.d_g;
  p.dh0 = a.d_h0;
  p.du_part = want_du ? reinterpret_cast<float*>(ws + o_du) : nullptr;
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.chunks_per_seq = chunks_per_seq > 0 ? chunks_per_seq : 1;
  p.num_seqs = N;
  p.heads = H;
  p.value_dim = dv;
  p.scale = a.fwd.scale;
  p.exclusive = excl ? 1 : 0;

  if (want_du) LINAC_CUDA_CHECK(cudaMemsetAsync(p.du_part, 0, chunk_vec_bytes, stream));
#ifdef LINAC_HAVE_HOPPER
  hopper::DiagGradParams hp{};
  if (hopper) {
    hp.q = p.q;
    hp.k = p.k;
    hp.v = p.v;
    hp.d_o = p.d_o;
    hp.g = p.g;
    hp.u = p.u;
    hp.h0 = p.h0;
    hp.d_ht = p.d_ht;
    hp.dh0 = p.dh0;
    hp.states = p.states;  // sized for the input dtype above
    hp.dstates = p.dstates;
    hp.dq = p.dq;
    hp.dk = p.dk;
    hp.dv = p.dv;
    hp.dg = p.dg;
    hp.du_part = p.du_part;
    hp.cu_seqlens = p.cu_seqlens;
    hp.seq_len = p.seq_len;
    hp.chunks_per_seq = p.chunks_per_seq;
    hp.num_seqs = p.num_seqs;
    hp.heads = p.heads;
    hp.value_dim = p.value_dim;
    hp.scale = p.scale;
    hp.exclusive = p.exclusive;
    hopper::diagonalStateScan(dtype, s, hp, stream);
  }
#endif
  if (!hopper) {
    auto kernel = diagStateScanKernel<T, DK, PreciseState>;
    setSmem(kernel, ScanSmem::bytes);
    kernel<<<dim3(nvb, H * nks, 2 * N), kThreads, ScanSmem::bytes, stream>>>(p);
    LINAC_CUDA_CHECK_LAUNCH("diagStateScanKernel");
  }
#ifdef LINAC_HAVE_HOPPER
  if (hopper) hopper::diagonalGrad(dtype, s, hp, slots, stream);
#endif
  if (!hopper && slots > 0 && (p.dq || p.dk || want_dg || want_du)) {
    auto kernel = diagDqdkKernel<T, DK, PreciseState>;
    setSmem(kernel, DqdkSmem::bytes);
    kernel<<<dim3(unsigned(slots), H, nks), kThreads, DqdkSmem::bytes, stream>>>(p);
    LINAC_CUDA_CHECK_LAUNCH("diagDqdkKernel");
  }
  if (!hopper && slots > 0 && p.dv) {
    auto kernel = diagDvKernel<T, DK, PreciseDv>;
    setSmem(kernel, DvSmem::bytes);
    kernel<<<dim3(unsigned(slots), H, nvb), kThreads, DvSmem::bytes, stream>>>(p);
    LINAC_CUDA_CHECK_LAUNCH("diagDvKernel");
  }
  if (want_du) {
    const int total = H * DK;
    diagDuKernel<<<(total + kReduceThreads - 1) / kReduceThreads, kReduceThreads, 0, stream>>>(
        p.du_part, a.d_u, slots, H, DK);
    LINAC_CUDA_CHECK_LAUNCH("diagDuKernel");
  }
  LINAC_CUDA_CHECK(cudaFreeAsync(ws, stream));
}

template <typename T>
void dispatchKeyDim(const RecurrenceKind& kind, const RecurrenceShape& s,
                    const RecurrenceBackwardArgs& a, int N, cudaStream_t stream) {
  switch (s.key_dim) {
    case 64: launchDiagBwd<T, 64>(kind, s, a, N, stream); break;
    case 128: launchDiagBwd<T, 128>(kind, s, a, N, stream); break;
    case 256: launchDiagBwd<T, 256>(kind, s, a, N, stream); break;
    default:
      LINAC_REQUIRE(false, "diagonalChunkBackward: key_dim must be 64, 128 or 256, got " +
                               std::to_string(s.key_dim));
  }
}

}  // namespace

bool diagonalBackwardSupported(const RecurrenceKind& kind, const RecurrenceShape& shape) {
  const bool dk_ok = shape.key_dim == 64 || shape.key_dim == 128 || shape.key_dim == 256;
  return kind.decay == DecayClass::Diagonal && kind.update == UpdateRule::Additive && dk_ok &&
         shape.value_dim > 0 && shape.value_dim % kSlice == 0 &&
         shape.heads * (shape.key_dim / kSlice) <= 65535;
}

void diagonalChunkBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                           const RecurrenceBackwardArgs& args, int num_seqs, cudaStream_t stream) {
  LINAC_REQUIRE(diagonalBackwardSupported(kind, shape),
                "diagonalChunkBackward: unsupported kind or shape (dk " +
                    std::to_string(shape.key_dim) + ", dv " + std::to_string(shape.value_dim) + ")");
  LINAC_REQUIRE(args.fwd.g, "diagonalChunkBackward: the diagonal decay needs g [B, T, H, dk]");
  LINAC_REQUIRE(kind.readout != Readout::ExclusiveBonus || args.fwd.u,
                "diagonalChunkBackward: exclusive_bonus needs u [H, dk]");
  LINAC_REQUIRE(num_seqs > 0 && 2 * int64_t(num_seqs) <= 65535,
                "diagonalChunkBackward: grid too large (2 N must be <= 65535)");
  switch (dtype) {
    case DType::F32: dispatchKeyDim<float>(kind, shape, args, num_seqs, stream); break;
    case DType::BF16: dispatchKeyDim<__nv_bfloat16>(kind, shape, args, num_seqs, stream); break;
    case DType::F16: dispatchKeyDim<__half>(kind, shape, args, num_seqs, stream); break;
  }
}

}  // namespace linac::kernels::cuda
