// Chunkwise-parallel forward skeleton for the matrix-state recurrence (recurrence.h), fla style:
// one CTA per (sequence, head, value block of BV columns) walks the sequence chunk by chunk
// (C tokens), carrying the fp32 state block S [dk x BV] in shared memory.
//
// Per chunk (tokens t = 0..C-1 of the chunk, b = cumulative log-decay from the chunk start,
// inclusive, fp32; bq = b for the inclusive readout, bq_t = b_{t-1} (b_{-1} = 0) for the exclusive
// one; padded tokens past the sequence end have q = k = v = 0, g = 0, beta = 0):
//   additive:  A[t][s] = sum_c q_tc k_sc exp(bq_tc - b_sc)  (s <= t inclusive, s < t exclusive)
//              o   = scale * ((Q . exp(bq)) S + A V [+ ((q.u.k) 1) V exclusive])
//              S  <- exp(b_last) . S + (K . exp(b_last - b))^T V
//   delta:     the rule is additive in d_t = beta_t (v_t - S_{t-1}^T diag(exp(g_t)) k_t):
//              M[t][s] = sum_c k_tc k_sc exp(b_tc - b_sc) (s < t),  X = (I + diag(beta) M)^-1,
//              Tm = X diag(beta),  W = Tm (K . exp(b)),  D = Tm V - W S,
//              then o and S as for additive with V replaced by D (the bonus term keeps v).
// Every exponent is <= 0: products with a diagonal decay are split into 16-token sub-blocks; a
// pair of sub-blocks i > j factors exp(bq_t - b_s) = exp(bq_t - r_j) exp(r_j - b_s) with r_j the
// cumulative decay at the last token of sub-block j, and diagonal sub-blocks are summed
// elementwise. Log-decays of -20 per token therefore underflow to 0, never to inf or NaN.
//
// Chunk products run on tensor cores (mma.sync m16n8k8 tf32, fp32 accumulators); fp32 inputs use
// 3xTF32 for ~fp32 accuracy.
//
// The Roles policy (chunk_roles.cuh) says where q, k, decay and beta come from: the tensors of
// ChunkFwdParams (MaterializedRoles), or a variant's spec expressions evaluated from its raw
// operands while the chunk is loaded, with q / k optionally L2-normalised in shared memory (the
// prologue fused into the kernel; the generated policies live in generated/<variant>/).
#pragma once

#include "../common/recurrence.h"
#include "chunk_roles.cuh"
#include "cuda_check.h"
#include "tile.cuh"

#include <string>
#include <type_traits>

namespace linac::kernels::cuda {

template <typename T>
struct ChunkFwdParams {
  const T* q;          // [B, T, H, dk]
  const T* k;          // [B, T, H, dk]
  const T* v;          // [B, T, H, dv]
  const float* g;      // None: null; Fixed [H]; Scalar [B, T, H]; Diagonal [B, T, H, dk]
  const float* beta;   // [B, T, H] (delta)
  RoleOperands qRole, kRole, decayRole, betaRole;  // raw operands of the roles Roles computes
  const float* u;      // [H, dk] (exclusive_bonus)
  const float* h0;     // [N, H, dk, dv] or null
  T* o;                // [B, T, H, dv]
  float* ht;           // [N, H, dk, dv] or null
  const int64_t* cu_seqlens;  // [N + 1] device, or null
  int64_t seq_len;     // T
  int heads;           // H
  int value_dim;       // dv
  float scale;
  int decay;           // DecayClass
  int exclusive;       // Readout == ExclusiveBonus
};

/// The parameters every launch of the forward shares (q, k, v tiles, u, h0, o, ht, sizes, scale,
/// kind); the caller adds g / beta or the roles' operands.
template <typename T>
ChunkFwdParams<T> chunkFwdParams(const RecurrenceKind& kind, const RecurrenceShape& s, const void* q,
                                 const void* k, const void* v, const float* u, const float* h0,
                                 void* o, float* ht, float scale) {
  ChunkFwdParams<T> p{};
  p.q = static_cast<const T*>(q);
  p.k = static_cast<const T*>(k);
  p.v = static_cast<const T*>(v);
  p.u = u;
  p.h0 = h0;
  p.o = static_cast<T*>(o);
  p.ht = ht;
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.heads = int(s.heads);
  p.value_dim = int(s.value_dim);
  p.scale = scale;
  p.decay = int(kind.decay);
  p.exclusive = kind.readout == Readout::ExclusiveBonus ? 1 : 0;
  return p;
}

/// The number of sequences (grid z) of a forward launch, after checking the shape; `op` names the
/// caller in the errors.
inline int64_t checkedNumSeqs(const RecurrenceShape& s, const char* op) {
  LINAC_REQUIRE(s.heads > 0 && s.seq_len >= 0, std::string(op) + ": bad shape");
  int64_t num_seqs = s.batch;
  if (s.cu_seqlens) {
    LINAC_REQUIRE(s.batch == 1, std::string(op) + ": cu_seqlens needs batch == 1");
    LINAC_REQUIRE(s.num_seqs > 0, std::string(op) + ": cu_seqlens needs num_seqs > 0");
    num_seqs = s.num_seqs;
  }
  LINAC_REQUIRE(num_seqs <= 65535 && s.heads <= 65535, std::string(op) + ": grid too large");
  return num_seqs;
}

constexpr int kChunkWarps = 8;
constexpr int kChunkThreads = kChunkWarps * 32;

/// Shared-memory footprint (floats) of one configuration.
template <int DK, int BV, int C, bool DELTA, bool DIAG>
struct ChunkSmem {
  static constexpr int LDK = DK + 4;   // rows read as A fragments: stride = 4 mod 32, conflict-free
  static constexpr int LDV = BV + 8;   // rows read as B fragments: stride = 8 mod 32
  static constexpr int LDC = C + 4;
  static constexpr int Q = 0;
  static constexpr int K = Q + C * LDK;
  static constexpr int Bc = K + C * LDK;                      // cumulative log-decay
  static constexpr int V = Bc + (DIAG ? C * LDK : C);
  static constexpr int S = V + C * LDV;
  static constexpr int A = S + DK * LDV;
  static constexpr int Bonus = A + C * LDC;
  static constexpr int Beta = Bonus + C;
  static constexpr int W = Beta + C;                          // delta only from here
  static constexpr int D = W + (DELTA ? C * LDK : 0);
  static constexpr int Tm = D + (DELTA ? C * LDV : 0);
  static constexpr int total = Tm + (DELTA ? C * LDC : 0);
  static constexpr size_t bytes = size_t(total) * sizeof(float);
};

constexpr size_t kMaxSmemBytes = 227 * 1024;

/// Picks (C, BV) for (DK, DELTA, DIAG): the largest chunk and value block that fit.
template <int DK, bool DELTA, bool DIAG>
struct ChunkConfig {
  static constexpr bool fits(int c, int bv) {
    // mirror of ChunkSmem without templates on c/bv
    const int ldk = DK + 4, ldv = bv + 8, ldc = c + 4;
    long total = 2L * c * ldk + (DIAG ? c * ldk : c) + c * ldv + DK * ldv + c * ldc + 2 * c;
    if (DELTA) total += long(c) * ldk + c * ldv + c * ldc;
    return size_t(total) * 4 <= kMaxSmemBytes;
  }
  static constexpr int C = fits(64, 64) ? 64 : (fits(32, 64) ? 32 : 32);
  static constexpr int BV = fits(C, 64) ? 64 : 32;
};

template <typename T, int DK, int BV, int C, bool DELTA, bool DIAG, class Roles = MaterializedRoles>
__global__ void __launch_bounds__(kChunkThreads, 1) chunkForwardKernel(const ChunkFwdParams<T> p) {
  using namespace tile;
  using L = ChunkSmem<DK, BV, C, DELTA, DIAG>;
  constexpr bool Precise = std::is_same_v<T, float>;
  constexpr int NSUB = C / 16;
  constexpr int NT = 4;  // n-tiles (8 columns each) per warp item
  static_assert(C % 16 == 0 && BV % 32 == 0 && DK % 32 == 0, "tile shape");
  static_assert(C >= 32 && C <= 64, "warp scan of scalar decays handles 32 <= C <= 64");
  static_assert(L::bytes <= kMaxSmemBytes, "shared memory");

  extern __shared__ __align__(16) float smem[];
  float* sQ = smem + L::Q;       // [C, LDK]
  float* sK = smem + L::K;       // [C, LDK]
  float* sB = smem + L::Bc;      // DIAG: [C, LDK], else [C]
  float* sV = smem + L::V;       // [C, LDV]
  float* sS = smem + L::S;       // [DK, LDV]
  float* sA = smem + L::A;       // [C, LDC]
  float* sBonus = smem + L::Bonus;  // [C]
  float* sBeta = smem + L::Beta;    // [C]
  float* sW = smem + L::W;       // [C, LDK] (delta)
  float* sD = smem + L::D;       // [C, LDV] (delta)
  float* sT = smem + L::Tm;      // [C, LDC] (delta)

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int vb = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
  const int H = p.heads, dv = p.value_dim, v0 = vb * BV;
  int64_t bos, len;
  if (p.cu_seqlens) {
    bos = p.cu_seqlens[n];
    len = p.cu_seqlens[n + 1] - bos;
  } else {
    bos = int64_t(n) * p.seq_len;
    len = p.seq_len;
  }
  const bool excl = p.exclusive != 0;
  // Operand j of a computed role at token `tok` (an index into the packed [B * T] tokens).
  const int64_t bIndex = p.cu_seqlens ? 0 : n;
  auto roleAt = [&](const RoleOperands& role, int64_t tok, int c) {
    return RoleAt{role, bIndex, tok - bIndex * p.seq_len, h, c};
  };
  float gfix = 0.f;
  if (p.decay == int(DecayClass::Fixed)) {
    if constexpr (Roles::kComputeDecay) gfix = Roles::decay(roleAt(p.decayRole, bos, 0));
    else gfix = p.g[h];
  }
  auto ex = [](float x) { return Precise ? expf(x) : __expf(x); };

  // Accessors into the chunk's cumulative log-decays.
  auto b = [&](int t, int c) -> float { return DIAG ? sB[t * L::LDK + c] : sB[t]; };
  auto bx = [&](bool shift, int t, int c) -> float {
    return shift ? (t > 0 ? b(t - 1, c) : 0.f) : b(t, c);
  };

  // Initial state block.
  {
    const int64_t base = (int64_t(n) * H + h) * DK * dv + v0;
    for (int i = tid; i < DK * BV; i += kChunkThreads) {
      const int c = i / BV, j = i - c * BV;
      sS[c * L::LDV + j] = p.h0 ? p.h0[base + int64_t(c) * dv + j] : 0.f;
    }
  }

  // P[t][s] = sum_c X[t][c] K[s][c] exp(bx(t,c) - b(s,c)) for s <= t (s < t when strict), 0 above;
  // handed to store(t, s, value) for every t, s in [0, C).
  auto decayedProduct = [&](const float* sX, bool shift, bool strict, auto&& store) {
    for (int item = warp; item < NSUB * NSUB; item += kChunkWarps) {
      const int i = item / NSUB, j = item - i * NSUB;
      if (i < j || (DIAG && i == j)) {
        if (i < j) {
          for (int e = lane; e < 256; e += 32) store(16 * i + (e >> 4), 16 * j + (e & 15), 0.f);
        }
        continue;
      }
      float acc[2][4];
      zeroAcc(acc);
      if constexpr (DIAG) {
        const int r = 16 * j + 15;  // i > j here
        warpTileProduct<2, Precise>(
            acc, 16 * i, 16 * j, DK,
            [&](int t, int c) { return sX[t * L::LDK + c] * ex(bx(shift, t, c) - b(r, c)); },
            [&](int c, int s) { return sK[s * L::LDK + c] * ex(b(r, c) - b(s, c)); });
        forEachAcc(acc, 16 * i, 16 * j, [&](int t, int s, float& x) { store(t, s, x); });
      } else {
        warpTileProduct<2, Precise>(
            acc, 16 * i, 16 * j, DK, [&](int t, int c) { return sX[t * L::LDK + c]; },
            [&](int c, int s) { return sK[s * L::LDK + c]; });
        forEachAcc(acc, 16 * i, 16 * j, [&](int t, int s, float& x) {
          const bool keep = strict ? (s < t) : (s <= t);
          store(t, s, keep ? x * ex(bx(shift, t, 0) - b(s, 0)) : 0.f);
        });
      }
    }
    if constexpr (DIAG) {  // diagonal sub-blocks, elementwise with exp(bx_t - b_s), s <= t
      for (int e = tid; e < NSUB * 256; e += kChunkThreads) {
        const int blk = e >> 8, t = 16 * blk + ((e >> 4) & 15), s = 16 * blk + (e & 15);
        float acc = 0.f;
        if (strict ? (s < t) : (s <= t)) {
          const float* xr = sX + t * L::LDK;
          const float* kr = sK + s * L::LDK;
          const float* bt = shift ? (t > 0 ? sB + (t - 1) * L::LDK : nullptr) : sB + t * L::LDK;
          const float* bs = sB + s * L::LDK;
#pragma unroll 8
          for (int c = 0; c < DK; ++c) acc += xr[c] * kr[c] * ex((bt ? bt[c] : 0.f) - bs[c]);
        }
        store(t, s, acc);
      }
    }
  };

  // Register-staged loads of the next chunk overlap the current chunk's compute.
  // Materialised roles stage their raw elements, computed ones their values (the unused kind of
  // fetcher of each role is never touched and costs no registers).
  ChunkFetcher<T, C, DK, kChunkThreads> fq, fk;
  ChunkFetcher<T, C, BV, kChunkThreads> fv;
  ChunkFetcher<float, C, (DIAG ? DK : 4), kChunkThreads> fg;  // DIAG only
  RoleFetcher<T, C, DK, kChunkThreads> rq, rk, rg;            // computed q, k, diagonal decay
  // The tile operand of a computed role at token `tok` (null when the role has none).
  auto tileOf = [&](const RoleOperands& role, int64_t tok) -> const T* {
    if (role.tile < 0) return nullptr;
    const FusedOperand& x = role.operands[role.tile];
    return static_cast<const T*>(x.data) + bIndex * x.strides[0] +
           (tok - bIndex * p.seq_len) * x.strides[1] + int64_t(h) * x.strides[2];
  };
  // A computed role's RoleAt at chunk row t (its first token tok0); the fetcher fills the channel.
  auto rowOf = [&](const RoleOperands& role, int64_t tok0) {
    return [&, tok0](int t) { return roleAt(role, tok0 + t, 0); };
  };
  float gs0 = 0.f, gs1 = 0.f, beta_r = 0.f;                  // scalar decays (warp 0), beta
  auto fetch = [&](int64_t c0) {
    const int lc = int((len - c0) < C ? (len - c0) : int64_t(C));
    const int64_t tk = bos + c0;
    if constexpr (Roles::kComputeQ) rq.fetch(tileOf(p.qRole, tk), int64_t(H) * DK, lc);
    else fq.fetch(p.q + (tk * H + h) * DK, int64_t(H) * DK, lc);
    if constexpr (Roles::kComputeK) rk.fetch(tileOf(p.kRole, tk), int64_t(H) * DK, lc);
    else fk.fetch(p.k + (tk * H + h) * DK, int64_t(H) * DK, lc);
    fv.fetch(p.v + (tk * H + h) * dv + v0, int64_t(H) * dv, lc);
    if constexpr (DIAG && Roles::kComputeDecay) {
      rg.fetch(tileOf(p.decayRole, tk), int64_t(H) * DK, lc);
    } else if constexpr (DIAG) {
      fg.fetch(p.g + (tk * H + h) * DK, int64_t(H) * DK, lc);
    } else if (warp == 0) {
      auto gval = [&](int t) -> float {
        if (t >= lc) return 0.f;
        if (p.decay == int(DecayClass::Scalar)) {
          if constexpr (Roles::kComputeDecay) return Roles::decay(roleAt(p.decayRole, tk + t, 0));
          else return p.g[(tk + t) * H + h];
        }
        return gfix;  // Fixed, or 0 for None
      };
      gs0 = gval(lane);
      gs1 = (C > 32) ? gval(lane + 32) : 0.f;
    }
    if constexpr (DELTA) {
      if (tid < C && tid < lc) {
        if constexpr (Roles::kComputeBeta) beta_r = Roles::beta(roleAt(p.betaRole, tk + tid, 0));
        else beta_r = p.beta[(tk + tid) * H + h];
      } else if (tid < C) {
        beta_r = 0.f;
      }
    }
  };
  if (len > 0) fetch(0);

  for (int64_t t0 = 0; t0 < len; t0 += C) {
    const int Lc = int((len - t0) < C ? (len - t0) : int64_t(C));
    const int64_t tok0 = bos + t0;
    __syncthreads();  // the previous chunk is done with every buffer but sS

    // ---- P0: commit the staged chunk, prefetch the next, cumulate log-decays ----------------
    if constexpr (Roles::kComputeQ)
      rq.commit(sQ, L::LDK, rowOf(p.qRole, tok0), [](const RoleAt& at) { return roundTo<T>(Roles::q(at)); });
    else
      fq.commit(sQ, L::LDK);
    if constexpr (Roles::kComputeK)
      rk.commit(sK, L::LDK, rowOf(p.kRole, tok0), [](const RoleAt& at) { return roundTo<T>(Roles::k(at)); });
    else
      fk.commit(sK, L::LDK);
    fv.commit(sV, L::LDV);
    if constexpr (DIAG && Roles::kComputeDecay)
      rg.commit(sB, L::LDK, rowOf(p.decayRole, tok0), [](const RoleAt& at) { return Roles::decay(at); });
    else if constexpr (DIAG)
      fg.commit(sB, L::LDK);
    if constexpr (DELTA) {
      if (tid < C) sBeta[tid] = beta_r;
    }
    if (!DIAG && warp == 0) {
      float x0 = gs0, x1 = gs1;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const float y0 = __shfl_up_sync(0xffffffffu, x0, off);
        const float y1 = __shfl_up_sync(0xffffffffu, x1, off);
        if (lane >= off) { x0 += y0; x1 += y1; }
      }
      const float tot0 = __shfl_sync(0xffffffffu, x0, 31);
      if (lane < C) sB[lane] = x0;
      if (C > 32) sB[lane + 32] = x1 + tot0;
    }
    if (t0 + C < len) fetch(t0 + C);
    if constexpr (DIAG) {
      __syncthreads();
      for (int c = tid; c < DK; c += kChunkThreads) {
        float acc = 0.f;
#pragma unroll 8
        for (int t = 0; t < C; ++t) {
          acc += sB[t * L::LDK + c];
          sB[t * L::LDK + c] = acc;
        }
      }
    }
    __syncthreads();
    if constexpr (Roles::kNormQ || Roles::kNormK) {  // the fused prologue's L2 norm of q / k
      if constexpr (Roles::kNormQ) l2NormalizeRows<T, DK>(sQ, L::LDK, C, warp, kChunkWarps);
      if constexpr (Roles::kNormK) l2NormalizeRows<T, DK>(sK, L::LDK, C, warp, kChunkWarps);
      __syncthreads();
    }

    if (excl) {  // bonus[t] = sum_c q_tc u_c k_tc
      for (int t = warp; t < C; t += kChunkWarps) {
        float acc = 0.f;
        for (int c = lane; c < DK; c += 32) acc += sQ[t * L::LDK + c] * p.u[h * DK + c] * sK[t * L::LDK + c];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0) sBonus[t] = acc;
      }
    }

    const float* sVal = sV;  // the values the additive form consumes
    if constexpr (DELTA) {
      // ---- P1: LT[s][t] = beta_t M[t][s] (strictly lower M, stored transposed) --------------
      decayedProduct(sK, false, true, [&](int t, int s, float x) { sA[s * L::LDC + t] = sBeta[t] * x; });
      __syncthreads();
      // ---- P2: X = (I + L)^-1 by column, Tm = X diag(beta) ------------------------------------
      if (tid < C) {
        const int s = tid;
        float x[C];
#pragma unroll
        for (int i = 0; i < C; ++i) x[i] = (i == s) ? 1.f : 0.f;
#pragma unroll
        for (int j = 0; j < C - 1; ++j) {
          const float xj = x[j];
          const float* lt = sA + j * L::LDC;  // lt[i] = L[i][j], zero for i <= j
#pragma unroll
          for (int i4 = (j + 1) / 4; i4 < C / 4; ++i4) {
            const float4 l4 = *reinterpret_cast<const float4*>(lt + 4 * i4);
            x[4 * i4 + 0] -= l4.x * xj;
            x[4 * i4 + 1] -= l4.y * xj;
            x[4 * i4 + 2] -= l4.z * xj;
            x[4 * i4 + 3] -= l4.w * xj;
          }
        }
        const float bs = sBeta[s];
#pragma unroll
        for (int i = 0; i < C; ++i) sT[i * L::LDC + s] = x[i] * bs;
      }
      __syncthreads();
      // ---- P3 (delta part): W = Tm (K . exp(b)) ---------------------------------------------
      for (int item = warp; item < (C / 16) * (DK / (8 * NT)); item += kChunkWarps) {
        const int mt = item / (DK / (8 * NT)), nt = item - mt * (DK / (8 * NT));
        float acc[NT][4];
        zeroAcc(acc);
        warpTileProduct<NT, Precise>(
            acc, 16 * mt, 8 * NT * nt, 16 * (mt + 1), [&](int t, int s) { return sT[t * L::LDC + s]; },
            [&](int s, int c) { return sK[s * L::LDK + c] * ex(b(s, c)); });
        forEachAcc(acc, 16 * mt, 8 * NT * nt, [&](int t, int c, float& x) { sW[t * L::LDK + c] = x; });
      }
    }
    // ---- P3: A = decayed, masked Q K^T ---------------------------------------------------------
    decayedProduct(sQ, excl, excl, [&](int t, int s, float x) { sA[t * L::LDC + s] = x; });
    __syncthreads();

    if constexpr (DELTA) {
      // ---- P4: D = Tm V - W S ----------------------------------------------------------------
      for (int item = warp; item < (C / 16) * (BV / (8 * NT)); item += kChunkWarps) {
        const int mt = item / (BV / (8 * NT)), nt = item - mt * (BV / (8 * NT));
        float acc[NT][4];
        zeroAcc(acc);
        warpTileProduct<NT, Precise>(
            acc, 16 * mt, 8 * NT * nt, 16 * (mt + 1), [&](int t, int s) { return sT[t * L::LDC + s]; },
            [&](int s, int j) { return sV[s * L::LDV + j]; });
        warpTileProduct<NT, Precise>(
            acc, 16 * mt, 8 * NT * nt, DK, [&](int t, int c) { return -sW[t * L::LDK + c]; },
            [&](int c, int j) { return sS[c * L::LDV + j]; });
        forEachAcc(acc, 16 * mt, 8 * NT * nt, [&](int t, int j, float& x) { sD[t * L::LDV + j] = x; });
      }
      __syncthreads();
      sVal = sD;
    }

    // ---- P5: o = scale * ((Q . exp(bq)) S + A Val [+ bonus V]) --------------------------------
    for (int item = warp; item < (C / 16) * (BV / (8 * NT)); item += kChunkWarps) {
      const int mt = item / (BV / (8 * NT)), nt = item - mt * (BV / (8 * NT));
      float acc[NT][4];
      zeroAcc(acc);
      warpTileProduct<NT, Precise>(
          acc, 16 * mt, 8 * NT * nt, DK,
          [&](int t, int c) { return sQ[t * L::LDK + c] * ex(bx(excl, t, c)); },
          [&](int c, int j) { return sS[c * L::LDV + j]; });
      warpTileProduct<NT, Precise>(
          acc, 16 * mt, 8 * NT * nt, 16 * (mt + 1), [&](int t, int s) { return sA[t * L::LDC + s]; },
          [&](int s, int j) { return sVal[s * L::LDV + j]; });
      if (excl) {
        forEachAcc(acc, 16 * mt, 8 * NT * nt,
                   [&](int t, int j, float& x) { x += sBonus[t] * sV[t * L::LDV + j]; });
      }
      storeAcc<T, NT>(p.o + (tok0 * H + h) * dv + v0, int64_t(H) * dv, acc, 16 * mt, 8 * NT * nt,
                      Lc, p.scale);
    }
    __syncthreads();

    // ---- P6: S = exp(b_last) . S + (K . exp(b_last - b))^T Val ---------------------------------
    for (int item = warp; item < (DK / 16) * (BV / (8 * NT)); item += kChunkWarps) {
      const int mt = item / (BV / (8 * NT)), nt = item - mt * (BV / (8 * NT));
      float acc[NT][4];
      forEachAcc(acc, 16 * mt, 8 * NT * nt,
                 [&](int c, int j, float& x) { x = sS[c * L::LDV + j] * ex(b(C - 1, c)); });
      warpTileProduct<NT, Precise>(
          acc, 16 * mt, 8 * NT * nt, C,
          [&](int c, int s) { return sK[s * L::LDK + c] * ex(b(C - 1, c) - b(s, c)); },
          [&](int s, int j) { return sVal[s * L::LDV + j]; });
      forEachAcc(acc, 16 * mt, 8 * NT * nt, [&](int c, int j, float& x) { sS[c * L::LDV + j] = x; });
    }
  }

  if (p.ht) {
    __syncthreads();
    const int64_t base = (int64_t(n) * H + h) * DK * dv + v0;
    for (int i = tid; i < DK * BV; i += kChunkThreads) {
      const int c = i / BV, j = i - c * BV;
      p.ht[base + int64_t(c) * dv + j] = sS[c * L::LDV + j];
    }
  }
}

}  // namespace linac::kernels::cuda
