// Hopper backward, chunk-parallel gradients of the additive rule with a DIAGONAL decay (GLA,
// HGRN-2, RWKV-6; readout Inclusive or ExclusiveBonus), 16-bit inputs, dk and dv in {64, 128}
// (and dv in value tiles of 128, below): the wgmma replacement of chunk_backward_diagonal.cu's
// passes 2 and 3 (chunk_backward_diagonal_dqdk.cu, chunk_backward_diagonal_dv.cu), reading the
// state passes' workspaces S_c and dS_{c+1} in the input dtype (diag_state_scan.cuh; that file's
// header and chunk_backward_diagonal.cu's state the maths; numpy transcription with these
// kernels' roundings: tests/runtime/cuda/diag_bwd_host_check.py).
//
// With b[t][c] the in-chunk cumulative log-decay (double cumsum, kept fp32), bq_t = b_t
// (inclusive) or b_{t-1} (exclusive, b_{-1} = 0), B = b_{C-1} and the block references
// R_m = b_{16 m + 15} (m = 0, 1, 2):
//   D  = scale dO V^T (unmasked)
//   dq = scale e^{bq} . (dO S_c^T)
//        + sum_{j < 3} [t >= 16 (j + 1)] e^{bq_t - R_j} . (D[:, blk j] Ks[blk j])
//        + sum_{s <= t (< t), s in blk(t)} D[t][s] k_s e^{bq_t - b_s}             (decay chains)
//   dk = e^{B - b} . (V dS^T)
//        + sum_{i >= 1} [s < 16 i] e^{R_{i-1} - b_s} . (D[blk i, :]^T Qs[blk i])
//        + sum_{t >= s (> s), t in blk(s)} D[t][s] q_t e^{bq_t - b_s}             (decay chains)
//   dv = (K e^{B - b}) dS + A^T dO,   A^T[s][t in blk i] = scale (Kr_i Qs^T)[s][t] (s < 16 i),
//        diagonal blocks by decay chains, zero where t < s
// with Ks[blk j] = k e^{R_j - b}, Qs[blk i] = q e^{bq - R_{i-1}} and Kr_i[s] = k_s e^{R_{i-1} - b_s}
// for s < 16 i (zero below): every exponent is <= 0, strong gates underflow to 0, never overflow.
// Inside the 16 x 16 diagonal blocks e^{bq_t - b_s} is a product of per-token factors e^{g_u}
// (s < u <= t, or < t exclusive), carried along s or t by one multiply a step (a decay chain, as
// diagonal_prepare.cuh's), from e^{g} computed once per (t, c) instead of an exponential a term.
// The 16-token factorisation is diagonal_prepare.cuh's; a block product is one k block (16) of a
// 64-row wgmma, so each reference costs one instruction group of K = 16, not a 16-row tile.
// Exclusive bonus: dq_t += D[t][t] u k_t, dk_t += D[t][t] u q_t, A[t][t] = q_t . (u k_t), and the
// d_u partial sum_t D[t][t] q_t k_t per (slot, head) (chunk_backward_diagonal.cu's pass 4 sums).
// d_g per channel, chunk-local (nothing large cancels), with dq' = dq without the bonus:
//   dg_t = e^B <S_c, dS_{c+1}> + sum_{t' >= t} (q dq' - k dk_intra)_t' + sum_{s < t} (k dk_inter)_s
//          [- q_t dq'_t exclusive]
// k dk_inter is parked in dg's own output rows (written, then read back by the same CTA), the
// other two in shared memory the tiles free at the end. Every output element belongs to one CTA
// (dg's rows serve it as scratch before their final value): deterministic, no atomics.
// Roundings: S_c, dS_{c+1} (stored so by the state passes; <S_c, dS_{c+1}> is summed from them),
// D, K e^{B - b}, Kr_i and A^T are 16-bit wgmma operands; sums and the diagonal blocks' chains are
// fp32. Ks and Qs enter as a 16-bit pair with kLowHalves (p.low_halves: where the compiler marks
// the decay's gradient precise, RecurrenceKind::preciseDecayGrad; high halves alone otherwise),
// high half then low half (x - round(x), over the same tiles once the high products are done): a
// pair (t, s) of one chunk reaches d_g twice, through Ks in q dq' and through Qs in k dk_intra,
// and cancels there unless both are near exact. Rounded to 16 bits once, the residue of the large
// intra-chunk terms swamped the small d_g of strongly decaying channels: RWKV-6's d_w = d_g . g
// (decay -exp(w)) missed the bf16 gate (1.1e-2 on the H200; diag_bwd_host_check.py: 3.6e-2 with
// one half, 1.6e-3 with both, at w ~ N(0, 1.5^2)).
//
// Every term of dq, dk and d_g belongs to one key channel, and dv's terms are sums over the key
// channels, so the stage runs in two kernels small enough for two CTAs a SM (one CTA of three
// warpgroups per (chunk, head), which computed all of it at one CTA a SM, ran 1.6x slower for GLA):
//   the key stage (this file), one CTA of two warpgroups per (chunk slot, head, block of
//   kDiagKeyBlock key channels): D (each key block recomputes it; K = dv), dq and dk of
//   its channels (warpgroups 0 and 1: the inter-chunk products, the off-diagonal 16-token blocks
//   on wgmma, the diagonal blocks by decay chains), d_g of its channels, and for dv its channels'
//   share of A^T (fp32: the diagonal blocks by both warpgroups, off-diagonal block 3 on warpgroup
//   0, blocks 1 and 2 on warpgroup 1, so that both end together) and K e^{B - b};
//   the value stage (diag_value_grad.cuh), one warpgroup per (chunk slot, head, value block):
//   dv = (K e^{B - b}) dS_{c+1} + (the sum of the blocks' A^T) dO.
// Shared memory by phase (dv tile 128: 107 KB): q, k, D and b throughout; v, dO, S_c and dS_{c+1}
// (the block's rows) for D and the inter-chunk products; then Ks, Qs, two Kr_i tiles and e^{g}
// for the intra-chunk products; then d_g's staging over them; A^T's share beside.
// Value tiles (dv above the tile DV; the exclusive readout at dk 256 only, where the lab's cases
// have run it): only D, dO S^T, V dS^T and <S_c, dS_{c+1}> sum over the value columns, so a CTA
// walks the value tiles through one set of v, dO, S_c and dS_{c+1} buffers, accumulating those
// four in fp32 (the products on the tensor cores' accumulators), and runs everything after them
// once, so the intra-chunk work is not repeated per value tile and dq, dk, dg are rounded once.
#pragma once

#include "diag_grad_common.cuh"

namespace linac::kernels::cuda::hopper {

constexpr int kKeyGradThreads = 2 * kWarpgroupThreads;

template <class T, int DV>
struct DiagKeyGradTiles {
  static constexpr int C = kChunk, KB = kDiagKeyBlock;
  static constexpr int kLdAt = C + 4;  // A^T's fp32 rows, padded against bank conflicts
  using G = ChunkGradTiles<T, KB, DV>;
  struct Values {  // the inter-chunk products and D
    alignas(1024) T v[cosize_v<typename G::Vo>];
    alignas(1024) T o[cosize_v<typename G::Vo>];
    alignas(1024) T s[cosize_v<typename G::St>];   // S_c, the block's rows [d, v]
    alignas(1024) T ds[cosize_v<typename G::St>];  // dS_{c+1}, the block's rows [d, v]
  };
  struct Operands {  // the intra-chunk products
    alignas(1024) T ks[cosize_v<typename G::Qk>];  // Ks [s, c]
    alignas(1024) T qs[cosize_v<typename G::Qk>];  // Qs [t, c]
    alignas(1024) T x[2][cosize_v<typename G::Qk>];  // Kr_i [s, c]: Kr_1, Kr_2 (warpgroup 1), Kr_3 (0)
    float decay[C * KB];                              // e^{g} [t, c], unswizzled
  };
  struct Staging {  // d_g's per-(t, c) terms, fp32, b's layout
    float p[C * KB];    // q dq'
    float kin[C * KB];  // k dk_intra, then the suffix sums
  };
  struct Late {
    union {
      Operands op;
      Staging st;
    } tiles;
    alignas(16) float at[C * kLdAt];  // the block's share of A^T [s, t]
  };
  struct Smem {
    alignas(1024) T q[cosize_v<typename G::Qk>];
    alignas(1024) T k[cosize_v<typename G::Qk>];
    alignas(1024) T d[cosize_v<typename G::Sq>];  // D [t, s]
    union {
      Values val;
      Late late;
    } ph;
    alignas(16) float b[C * KB];  // g, then b; element (t, c) at bIndex(t, c)
    float zdot[KB];               // <S_c[c, :], dS_{c+1}[c, :]>
    float ddiag[C];               // D[t][t], fp32
    float u[KB];
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DV, bool kLowHalves, bool kValueTiles>
__global__ void __launch_bounds__(kKeyGradThreads, 2) diagKeyGradKernel(const DiagGradParams p) {
  using Tiles = DiagKeyGradTiles<T, DV>;
  using G = typename Tiles::G;
  constexpr int C = Tiles::C, KB = Tiles::KB, NB = kDiagBlock, kLdAt = Tiles::kLdAt;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, wg = tid / kWarpgroupThreads, wtid = tid % kWarpgroupThreads;
  const int h = blockIdx.y, H = p.heads, DK = p.key_dim;
  const int kb = int(blockIdx.z);
  const int k0 = kb * KB;
  const int64_t tok0 = bos + chunk * C, slot = coff + chunk;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int dvAll = kValueTiles ? p.value_dim : DV;  // kValueTiles: value tiles of DV columns
  const int64_t rowK = int64_t(H) * DK, rowV = int64_t(H) * dvAll;
  const int64_t offK = tok0 * rowK + int64_t(h) * DK + k0;  // the block's channels at token tok0
  const bool excl = p.exclusive != 0, wantDg = p.dg != nullptr;  // dg's rows also serve as scratch
  const bool wantValues = p.dv != nullptr;  // dv's operands for the value stage
  const float scale = p.scale;

  const auto tQ = smemTile(sm.q, typename G::Qk{});
  const auto tK = smemTile(sm.k, typename G::Qk{});
  const auto tD = smemTile(sm.d, typename G::Sq{});
  const auto tDt = smemTile(sm.d, typename G::SqT{});
  const auto tV = smemTile(sm.ph.val.v, typename G::Vo{});
  const auto tO = smemTile(sm.ph.val.o, typename G::Vo{});
  const auto tS = smemTile(sm.ph.val.s, typename G::St{});
  const auto tDS = smemTile(sm.ph.val.ds, typename G::St{});
  const auto tKs = smemTile(sm.ph.late.tiles.op.ks, typename G::Qk{});
  const auto tKst = smemTile(sm.ph.late.tiles.op.ks, typename G::QkT{});
  const auto tQs = smemTile(sm.ph.late.tiles.op.qs, typename G::Qk{});
  const auto tQst = smemTile(sm.ph.late.tiles.op.qs, typename G::QkT{});
  const auto tX = smemTile(sm.ph.late.tiles.op.x[wg], typename G::Qk{});  // this warpgroup's Kr_i
  float* const decay = sm.ph.late.tiles.op.decay;
  float* const at = sm.ph.late.at;
  float* const stP = sm.ph.late.tiles.st.p;
  float* const stK = sm.ph.late.tiles.st.kin;

  auto b = [&](int t, int c) { return sm.b[bIndex<KB>(t, c)]; };
  auto b2 = [&](int t, int c) { return *reinterpret_cast<const float2*>(&sm.b[bIndex<KB>(t, c)]); };
  auto bq2 = [&](int t, int c) {
    const int i = excl ? t - 1 : t;
    return i < 0 ? make_float2(0.f, 0.f) : b2(i, c);
  };
  auto ref2 = [&](int m, int c) { return b2(NB * m + NB - 1, c); };  // R_m
  auto exp2f2 = [](float2 x) { return make_float2(expFtz(x.x), expFtz(x.y)); };
  auto sub2 = [](float2 x, float2 y) { return make_float2(x.x - y.x, x.y - y.y); };
  // Ks[t][c] = k e^{R_m - b} (block m = t / 16 < 3, else 0) and Qs[t][c] = q e^{bq - R_{m - 1}}
  // (m > 0, else 0) in fp32, channel pairs (c, c + 1): the same values each time they are formed.
  auto ksPair = [&](int t, int c) {
    const int m = t / NB;
    if (m >= kDiagRefs) return make_float2(0.f, 0.f);
    const float2 kk = unpack2<T>(lds32(tK.at(t, c))), f = exp2f2(sub2(ref2(m, c), b2(t, c)));
    return make_float2(kk.x * f.x, kk.y * f.y);
  };
  auto qsPair = [&](int t, int c) {
    const int m = t / NB;
    if (m == 0) return make_float2(0.f, 0.f);
    const float2 qq = unpack2<T>(lds32(tQ.at(t, c))), f = exp2f2(sub2(bq2(t, c), ref2(m - 1, c)));
    return make_float2(qq.x * f.x, qq.y * f.y);
  };

  // ---- loads and phase 1: q, k and g (the block's channels); v, dO, S_c and dS_{c+1} (the block's
  // rows) one value tile of DV columns at a time, into the same buffers; D and dq_inter (warpgroup
  // 0), dk_inter (warpgroup 1) and <S_c, dS_{c+1}> summed over the tiles ----
  typename G::MmaXS mmaXS;
  const auto cX = accCoords<C, KB>(mmaXS);
  Tensor acc = partition_fragment_C(mmaXS, Shape<Int<C>, Int<KB>>{});  // dq (0) or dk (1)
  auto thrX = mmaXS.get_thread_slice(wtid);
  typename G::MmaOV mmaD;
  auto thrD = mmaD.get_thread_slice(wtid);
  const auto fO = thrX.partition_fragment_A(tO.tensor()(_, _, 0));
  auto loadValueTile = [&](int vt) {
    const int v0 = vt * DV;
    const int64_t offV = tok0 * rowV + int64_t(h) * dvAll + v0;
    loadTile<false, C, DV, kKeyGradThreads>(tV, 0, static_cast<const T*>(p.v) + offV, rowV, rows);
    loadTile<false, C, DV, kKeyGradThreads>(tO, 0, static_cast<const T*>(p.d_o) + offV, rowV, rows);
    // [slots, H, dk, dv]: the block's rows k0 .. k0 + KB, columns v0 .. v0 + DV
    const int64_t st = (slot * H + h) * int64_t(DK) * dvAll + int64_t(k0) * dvAll + v0;
    loadTile<false, KB, DV, kKeyGradThreads>(tS, 0, static_cast<const T*>(p.states) + st, dvAll, KB);
    loadTile<false, KB, DV, kKeyGradThreads>(tDS, 0, static_cast<const T*>(p.dstates) + st, dvAll, KB);
    copyCommit();
  };
  auto dotProducts = [&](bool first) {  // <S_c[d, :], dS_{c+1}[d, :]> per key row, threads KB ..
    for (int d = tid - KB; d < KB; d += kKeyGradThreads - KB) {
      float dot = first ? 0.f : sm.zdot[d];
      for (int v = 0; v < DV; v += 2) {
        const float2 a = unpack2<T>(lds32(tS.at(d, v))), e = unpack2<T>(lds32(tDS.at(d, v)));
        dot = fmaf(a.y, e.y, fmaf(a.x, e.x, dot));
      }
      sm.zdot[d] = dot;
    }
  };
  // dk_inter's product on warpgroup 1 (every tile after the first accumulates)
  auto keyProduct = [&](auto firstTile) {
    issue(acc);
    gemm<decltype(firstTile)::value>(mmaXS, thrX.partition_fragment_A(tV.tensor()(_, _, 0)),
                                     thrX.partition_fragment_B(tDS.tensor()(_, _, 0)), acc);
    commitAndWait(acc);
  };
  auto storeD = [&](const auto& accD) {
    forEachPair<typename G::MmaOV>(accCoords<C, C>(mmaD), [&](int i, int t, int s) {
      const float d0 = scale * accD(i), d1 = scale * accD(i + 1);
      sts32(tD.at(t, s), pack2<T>(d0, d1));
      if (s == t) sm.ddiag[t] = d0;
      if (s + 1 == t) sm.ddiag[t] = d1;
    });
  };
  {
    loadTile<false, C, KB, kKeyGradThreads>(tQ, 0, static_cast<const T*>(p.q) + offK, rowK, rows);
    loadTile<false, C, KB, kKeyGradThreads>(tK, 0, static_cast<const T*>(p.k) + offK, rowK, rows);
    const float* g = p.g + offK;
    for (int i = tid; i < C * KB / 4; i += kKeyGradThreads) {
      const int t = i / (KB / 4), c = (i % (KB / 4)) * 4;
      const bool valid = t < rows;
      copy16(static_cast<uint32_t>(__cvta_generic_to_shared(&sm.b[bIndex<KB>(t, c)])),
             g + (valid ? t * rowK + c : 0), valid);
    }
    loadValueTile(0);
    if (excl)
      for (int c = tid; c < KB; c += kKeyGradThreads) sm.u[c] = p.u[int64_t(h) * DK + k0 + c];
    copyWait<0>();
    __syncthreads();
    if (tid < KB) {  // b: cumsum along t, in double, a thread per channel, a block's loads first
      const int c = tid;
      double run = 0.0;
#pragma unroll 1
      for (int t0 = 0; t0 < C; t0 += NB) {
        float x[NB];
        CUTE_UNROLL
        for (int j = 0; j < NB; ++j) x[j] = sm.b[bIndex<KB>(t0 + j, c)];
        CUTE_UNROLL
        for (int j = 0; j < NB; ++j) {
          run += x[j];
          sm.b[bIndex<KB>(t0 + j, c)] = float(run);
        }
      }
    } else {
      dotProducts(true);
    }
    __syncthreads();
  }
  if constexpr (!kValueTiles) {
    // one tile: warpgroup 0 stores D while warpgroup 1's product runs, then forms dq_inter
    if (wg == 0) {
      Tensor accD = partition_fragment_C(mmaD, Shape<Int<C>, Int<C>>{});
      issue(accD);
      gemm<true>(mmaD, thrD.partition_fragment_A(tO.tensor()(_, _, 0)), thrD.partition_fragment_B(tV.tensor()(_, _, 0)),
                 accD);
      commitAndWait(accD);
      storeD(accD);
      issue(acc);
      gemm<true>(mmaXS, fO, thrX.partition_fragment_B(tS.tensor()(_, _, 0)), acc);
      commitAndWait(acc);
    } else {
      keyProduct(std::true_type{});
    }
  } else {
    // several tiles: D and dq_inter accumulate in one batch a tile; D is stored after the last
    Tensor accD = partition_fragment_C(mmaD, Shape<Int<C>, Int<C>>{});
    auto tileProducts = [&](auto firstTile) {
      constexpr bool kFirst = decltype(firstTile)::value;
      if (wg == 0) {
        issue(accD, acc);
        gemm<kFirst>(mmaD, thrD.partition_fragment_A(tO.tensor()(_, _, 0)),
                     thrD.partition_fragment_B(tV.tensor()(_, _, 0)), accD);
        gemm<kFirst>(mmaXS, fO, thrX.partition_fragment_B(tS.tensor()(_, _, 0)), acc);
        commitAndWait(accD, acc);
      } else {
        keyProduct(firstTile);
      }
    };
    tileProducts(std::true_type{});
#pragma unroll 1
    for (int vt = 1; vt < dvAll / DV; ++vt) {
      __syncthreads();  // the previous tile's products and dot products are done with its buffers
      loadValueTile(vt);
      copyWait<0>();
      __syncthreads();
      if (tid >= KB) dotProducts(false);
      tileProducts(std::false_type{});
    }
    __syncthreads();  // the last tile's dot products done
    if (wg == 0) storeD(accD);
  }
  if (wg == 0) {
    forEachPair<typename G::MmaXS>(cX, [&](int i, int t, int c) {
      const float2 f = exp2f2(bq2(t, c));
      acc(i) *= scale * f.x;
      acc(i + 1) *= scale * f.y;
    });
  } else {
    float* dg = p.dg + offK;
    forEachPair<typename G::MmaXS>(cX, [&](int i, int s, int c) {
      const float2 f = exp2f2(sub2(b2(C - 1, c), b2(s, c)));
      acc(i) *= f.x;
      acc(i + 1) *= f.y;
      if (wantDg && s < rows) {  // k dk_inter, read back in phase 4
        const float2 kk = unpack2<T>(lds32(tK.at(s, c)));
        *reinterpret_cast<float2*>(dg + s * rowK + c) = make_float2(kk.x * acc(i), kk.y * acc(i + 1));
      }
    });
  }
  fenceToAsyncProxy();
  __syncthreads();  // D stored; v, dO, S_c and dS_{c+1} are free

  // ---- the intra-chunk operands, all threads: Ks and Qs (high halves), e^{g} (1 past the
  // sequence's end), A^T cleared, and K e^{B - b} to global memory for the value stage ----
  forEachTilePair<C, KB, kKeyGradThreads>(
      tid,
      [&](int t, int c) {
        const float2 ks = ksPair(t, c), qs = qsPair(t, c);
        return make_uint2(pack2<T>(ks.x, ks.y), pack2<T>(qs.x, qs.y));
      },
      [&](int t, int c, uint2 x) {
        sts32(tKs.at(t, c), x.x);
        sts32(tQs.at(t, c), x.y);
      });
  {
    const float* g = p.g + offK;
    constexpr int kBatch = 4, kQuads = C * KB / 4;
    static_assert(kQuads % (kKeyGradThreads * kBatch) == 0, "whole batches of float4");
#pragma unroll 1
    for (int i0 = tid; i0 < kQuads; i0 += kKeyGradThreads * kBatch) {
      float4 x[kBatch];
      CUTE_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        const int i = i0 + j * kKeyGradThreads, t = i / (KB / 4), c = (i % (KB / 4)) * 4;
        x[j] = t < rows ? *reinterpret_cast<const float4*>(g + t * rowK + c) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      CUTE_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        const int i = i0 + j * kKeyGradThreads, t = i / (KB / 4), c = (i % (KB / 4)) * 4;
        *reinterpret_cast<float4*>(&decay[t * KB + c]) =
            make_float4(expFtz(x[j].x), expFtz(x[j].y), expFtz(x[j].z), expFtz(x[j].w));
      }
    }
  }
  if (wantValues) {
    for (int i = tid; i < C * kLdAt / 4; i += kKeyGradThreads)
      reinterpret_cast<float4*>(at)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    T* kexp = static_cast<T*>(p.kexp) + offK;
    for (int i = tid; i < C * KB / 2; i += kKeyGradThreads) {
      const int s = i / (KB / 2), c = (i % (KB / 2)) * 2;
      if (s >= rows) break;  // i ascends with s
      const float2 kk = unpack2<T>(lds32(tK.at(s, c))), f = exp2f2(sub2(b2(C - 1, c), b2(s, c)));
      *reinterpret_cast<uint32_t*>(kexp + s * rowK + c) = pack2<T>(kk.x * f.x, kk.y * f.y);
    }
  }
  fenceToAsyncProxy();
  __syncthreads();

  // A^T's diagonal blocks (the block's channels), both warpgroups: warp w of a warpgroup takes
  // block w, warpgroup g the source tokens s = g, g + 2, ...; a lane KB / 32 channels. Per source
  // token a decay chain runs up the block: w = k_s e^{bq_t - b_s} steps from t
  // to t + 1 by one multiply with e^{g} (registers), the channel sum by reduceScatter16.
  // Exclusive: A[t][t] = q_t . (u k_t).
  if (wantValues) {
    constexpr int CPL = KB / 32, kGroups = kKeyGradThreads / kWarpgroupThreads;
    const int warp = wtid / 32, lane = wtid % 32, c0 = lane * CPL, s0 = warp * NB;
    float ga[NB][CPL];  // e^{g_{s0 + ui}} of channels c0 ..
    CUTE_UNROLL
    for (int ui = 0; ui < NB; ++ui)
      CUTE_UNROLL
      for (int j = 0; j < CPL; ++j) ga[ui][j] = decay[(s0 + ui) * KB + c0 + j];
    auto diagonalBlock = [&](auto exclusive) {  // the readout as a constant: no select a term
      constexpr bool kExcl = decltype(exclusive)::value;
#pragma unroll 1
      for (int si = wg; si < NB; si += kGroups) {
        const int s = s0 + si;
        float w[CPL];
        CUTE_UNROLL
        for (int j = 0; j < CPL; j += 2) {
          const float2 x = unpack2<T>(lds32(tK.at(s, c0 + j)));
          w[j] = x.x;
          w[j + 1] = x.y;
        }
        float part[NB];
        CUTE_UNROLL
        for (int ti = 0; ti < NB; ++ti) {
          part[ti] = 0.f;
          if (ti < si) continue;  // warp-uniform
          const int t = s0 + ti;
          float x = 0.f;
          if (kExcl && ti == si) {  // the bonus; A[s + 1][s] has no decay either
            CUTE_UNROLL
            for (int j = 0; j < CPL; j += 2) {
              const float2 qq = unpack2<T>(lds32(tQ.at(t, c0 + j)));
              x += qq.x * sm.u[c0 + j] * w[j] + qq.y * sm.u[c0 + j + 1] * w[j + 1];
            }
            part[ti] = x;
            continue;
          }
          CUTE_UNROLL
          for (int j = 0; j < CPL; j += 2) {
            const float2 qq = unpack2<T>(lds32(tQ.at(t, c0 + j)));
            x = fmaf(qq.y, w[j + 1], fmaf(qq.x, w[j], x));
          }
          part[ti] = x;
          if (ti + 1 < NB)  // to t + 1: times e^{g_{t+1}} (exclusive e^{g_t})
            CUTE_UNROLL
            for (int j = 0; j < CPL; ++j) w[j] *= ga[kExcl ? ti : ti + 1][j];
        }
        const float sum = reduceScatter16(part, lane);
        const int ti = lane >> 1;
        if ((lane & 1) == 0 && ti >= si) at[s * kLdAt + s0 + ti] = scale * sum;
      }
    };
    if (excl)
      diagonalBlock(std::true_type{});
    else
      diagonalBlock(std::false_type{});
  }

  // Writes the low halves of Ks (or Qs) over its tile, from one warpgroup, once that warpgroup's
  // products with the high halves are done; the products that follow read them.
  auto lowHalves = [&](const auto& tile, auto pair) {
    warpgroupBarrier(wg);
    forEachTilePair<C, KB, kWarpgroupThreads>(
        wtid, [&](int t, int c) { return lowHalf2<T>(pair(t, c)); },
        [&](int t, int c, uint32_t x) { sts32(tile.at(t, c), x); });
    fenceToAsyncProxy();
    warpgroupBarrier(wg);
  };
  // A thread's accumulator rows (the wgmma layout): r and r + 8 of its warp's 16, one block.
  constexpr int kAccRegs = decltype(size(cX))::value, kChainRegs = kAccRegs / chainParts<kAccRegs>();
  const int accRow = int(get<0>(cX(0))), blk0 = accRow & ~(NB - 1);

  // A^T[s][t in blk i] = scale (Kr_i Qs^T)[s][t] for s < 16 i, blocks i of [iFirst, iLast], from
  // Qs's high halves: warpgroup 0 takes block 3 (48 rows of Kr_i), warpgroup 1 blocks 1 and 2 (16 +
  // 32), each in its own Kr tile, so that the two warpgroups' products end together.
  auto offDiagonalBlocksOfAt = [&](int iFirst, int iLast) {
    typename G::MmaQK mma;
    auto thr = mma.get_thread_slice(wtid);
    Tensor accA = partition_fragment_C(mma, Shape<Int<C>, Int<C>>{});
    const auto cA = accCoords<C, C>(mma);
#pragma unroll 1
    for (int i = iFirst; i <= iLast; ++i) {
      warpgroupBarrier(wg);  // the previous product has read x
      forEachTilePair<C, KB, kWarpgroupThreads>(
          wtid,
          [&](int s, int c) {
            uint32_t w = 0;
            if (s < NB * i) {
              const float2 kk = unpack2<T>(lds32(tK.at(s, c))), f = exp2f2(sub2(ref2(i - 1, c), b2(s, c)));
              w = pack2<T>(kk.x * f.x, kk.y * f.y);
            }
            return w;
          },
          [&](int s, int c, uint32_t w) { sts32(tX.at(s, c), w); });
      fenceToAsyncProxy();
      warpgroupBarrier(wg);
      issue(accA);
      gemm<true>(mma, thr.partition_fragment_A(tX.tensor()(_, _, 0)), thr.partition_fragment_B(tQs.tensor()(_, _, 0)),
                 accA);
      commitAndWait(accA);
      forEachPair<typename G::MmaQK>(cA, [&](int r, int s, int t) {
        if (s < NB * i && t / NB == i)
          *reinterpret_cast<float2*>(&at[s * kLdAt + t]) = make_float2(scale * accA(r), scale * accA(r + 1));
      });
    }
  };

  // ---- phase 2: the intra-chunk terms of dq (warpgroup 0) and dk (1), A^T's other blocks ----
  if (wg == 0) {
    if (wantValues) {
      offDiagonalBlocksOfAt(kDiagRefs, kDiagRefs);
      // Qs's high halves read: warpgroup 1 may now write its low halves over them
      if constexpr (kLowHalves) asm volatile("bar.arrive 3, %0;\n" ::"n"(2 * kWarpgroupThreads) : "memory");
    }
    typename G::MmaDK mma;
    auto thr = mma.get_thread_slice(wtid);
    const auto fA = thr.partition_fragment_A(tD.tensor()(_, _, 0));
    const auto fB = thr.partition_fragment_B(tKst.tensor()(_, _, 0));
    Tensor tmp = partition_fragment_C(mmaXS, Shape<Int<C>, Int<KB>>{});
#pragma unroll 1
    for (int half = 0; half < (kLowHalves ? 2 : 1); ++half) {  // Ks's high halves, then its low halves
      if (half == 1) lowHalves(tKs, ksPair);
#pragma unroll 1
      for (int j = 0; j < kDiagRefs; ++j) {  // s in block j: rows t in later blocks
        issue(tmp);
        mma.accumulate_ = GMMA::ScaleOut::Zero;
        cute::gemm(mma, fA(_, _, j), fB(_, _, j), tmp);
        commitAndWait(tmp);
        forEachPair<typename G::MmaXS>(cX, [&](int i, int t, int c) {
          if (t >= NB * (j + 1)) {
            const float2 f = exp2f2(sub2(bq2(t, c), ref2(j, c)));
            acc(i) += f.x * tmp(i);
            acc(i + 1) += f.y * tmp(i + 1);
          }
        });
      }
    }
    // diagonal block by decay chains: s walks down the block while f carries e^{bq_t - b_s} =
    // prod_{u = s + 1}^{t'} e^{g_u} (t' = t, or t - 1 exclusive) per (row, channel): 1 at s = t',
    // one multiply a step below it, 0 above (chainStep); the accumulator is taken kChainRegs
    // registers at a time, so the products fit beside it
    CUTE_UNROLL
    for (int part = 0; part < kAccRegs; part += kChainRegs) {
      float f[kChainRegs];
      CUTE_UNROLL
      for (int j = 0; j < kChainRegs; ++j) f[j] = 0.f;
#pragma unroll 1
      for (int s = blk0 + NB - 1; s >= blk0; --s) {
        const int lead = excl ? 1 : 0;  // row t's chain starts at s = t - lead
        const float2 d = make_float2(unpack1<T>(lds16(tD.at(accRow, s))), unpack1<T>(lds16(tD.at(accRow + 8, s))));
        const float2 e = make_float2(s == accRow - lead ? 1.f : 0.f, s == accRow + 8 - lead ? 1.f : 0.f);
        // e^{g_{s+1}} (at the chunk's last row any row will do: f is 0 or restarts there)
        chainStep<T>(acc, f, part, cX, accRow, decay + (s + 1 < C ? s + 1 : s) * KB, tK, s, d, e);
      }
    }
  } else {
    if (wantValues) offDiagonalBlocksOfAt(1, kDiagRefs - 1);
    typename G::MmaDtQ mma;
    auto thr = mma.get_thread_slice(wtid);
    const auto fA = thr.partition_fragment_A(tDt.tensor()(_, _, 0));
    const auto fB = thr.partition_fragment_B(tQst.tensor()(_, _, 0));
    Tensor tmp = partition_fragment_C(mmaXS, Shape<Int<C>, Int<KB>>{});
#pragma unroll 1
    for (int half = 0; half < (kLowHalves ? 2 : 1); ++half) {  // Qs's high halves, then its low halves
      if (half == 1) {
        // warpgroup 0's A^T product has read Qs's high halves (barrier 3, 256 threads: its arrive, this sync)
        if (wantValues) asm volatile("bar.sync 3, %0;\n" ::"n"(2 * kWarpgroupThreads) : "memory");
        lowHalves(tQs, qsPair);
      }
#pragma unroll 1
      for (int i = 1; i <= kDiagRefs; ++i) {  // t in block i: rows s in earlier blocks
        issue(tmp);
        mma.accumulate_ = GMMA::ScaleOut::Zero;
        cute::gemm(mma, fA(_, _, i), fB(_, _, i), tmp);
        commitAndWait(tmp);
        forEachPair<typename G::MmaXS>(cX, [&](int r, int s, int c) {
          if (s < NB * i) {
            const float2 f = exp2f2(sub2(ref2(i - 1, c), b2(s, c)));
            acc(r) += f.x * tmp(r);
            acc(r + 1) += f.y * tmp(r + 1);
          }
        });
      }
    }
    // diagonal block by decay chains: t walks up the block while f carries e^{bq_t - b_s} per
    // (row s, channel)
    CUTE_UNROLL
    for (int part = 0; part < kAccRegs; part += kChainRegs) {
      float f[kChainRegs];
      CUTE_UNROLL
      for (int j = 0; j < kChainRegs; ++j) f[j] = 0.f;
#pragma unroll 1
      for (int t = blk0; t < blk0 + NB; ++t) {
        const int lead = excl ? 1 : 0;  // row s's chain starts at t = s + lead
        const float2 d = make_float2(unpack1<T>(lds16(tD.at(t, accRow))), unpack1<T>(lds16(tD.at(t, accRow + 8))));
        const float2 e = make_float2(t == accRow + lead ? 1.f : 0.f, t == accRow + 8 + lead ? 1.f : 0.f);
        // e^{g_t} (exclusive e^{g_{t-1}}; at t = 0 any row will do: f is 0 or restarts there)
        chainStep<T>(acc, f, part, cX, accRow, decay + (excl ? (t > 0 ? t - 1 : 0) : t) * KB, tQ, t, d, e);
      }
    }
  }
  __syncthreads();  // every product done: the operand tiles are free for d_g's staging

  // ---- phase 3: dq and dk stored, d_g's per-(t, c) terms staged ----
  {
    const bool isDq = wg == 0;
    void* out = isDq ? p.dq : p.dk;
    const auto own = isDq ? tQ : tK;    // q for dq' (q dq'), k for dk (k dk)
    const auto other = isDq ? tK : tQ;  // the bonus: dq += D[t][t] u k, dk += D[s][s] u q
    float* stage = isDq ? stP : stK;
    forEachPair<typename G::MmaXS>(cX, [&](int i, int t, int c) {
      if (wantDg) {
        const float2 x = unpack2<T>(lds32(own.at(t, c)));
        *reinterpret_cast<float2*>(&stage[bIndex<KB>(t, c)]) = make_float2(x.x * acc(i), x.y * acc(i + 1));
      }
      float x0 = acc(i), x1 = acc(i + 1);
      if (excl) {
        const float2 y = unpack2<T>(lds32(other.at(t, c)));
        x0 += sm.ddiag[t] * sm.u[c] * y.x;
        x1 += sm.ddiag[t] * sm.u[c + 1] * y.y;
      }
      if (t >= rows) return;
      if (out) *reinterpret_cast<uint32_t*>(static_cast<T*>(out) + offK + t * rowK + c) = pack2<T>(x0, x1);
    });
  }
  __syncthreads();

  // ---- the block's A^T to its plane (all threads), the d_u partials (threads KB .. 2 KB) ----
  if (wantValues) {
    float* dst = p.at_part + int64_t(kb) * p.at_plane + (slot * H + h) * int64_t(C * C);
    for (int i = tid; i < C * C / 4; i += kKeyGradThreads) {
      const int s = i / (C / 4), t = (i % (C / 4)) * 4;
      reinterpret_cast<float4*>(dst)[i] = *reinterpret_cast<const float4*>(&at[s * kLdAt + t]);
    }
  }
  // sum_t D[t][t] q_t k_t per channel
  float* const du = p.du_part;
  if (excl && du && tid >= KB && tid < 2 * KB) {
    const int c = tid - KB;
    float a = 0.f;
    for (int t = 0; t < rows; ++t) {
      const float2 qq = unpack2<T>(lds32(tQ.at(t, c & ~1))), kk = unpack2<T>(lds32(tK.at(t, c & ~1)));
      a += sm.ddiag[t] * ((c & 1) ? qq.y * kk.y : qq.x * kk.x);
    }
    du[(slot * H + h) * DK + k0 + c] = a;
  }
  if (!wantDg || tid >= KB) return;

  // ---- phase 4: dg_t = Z + sum_{t' >= t} (p - kin)_t' + sum_{s < t} E_s
  // [- p_t], a thread per channel, E = k dk_inter parked in dg's rows ----
  const int c = tid;
  float* dg = p.dg + offK + c;
  float prefix = 0.f;
#pragma unroll 1
  for (int t0 = 0; t0 < C; t0 += NB) {
    float e[NB];
    CUTE_UNROLL
    for (int j = 0; j < NB; ++j) e[j] = t0 + j < rows ? dg[(t0 + j) * rowK] : 0.f;
    CUTE_UNROLL
    for (int j = 0; j < NB; ++j) {
      const int t = t0 + j;
      stK[bIndex<KB>(t, c)] = stP[bIndex<KB>(t, c)] - (stK[bIndex<KB>(t, c)] - e[j]);
      if (t < rows) dg[t * rowK] = prefix;
      prefix += e[j];
    }
  }
  const float z = expFtz(b(C - 1, c)) * sm.zdot[c];
  float suffix = 0.f;
#pragma unroll 1
  for (int t0 = C - NB; t0 >= 0; t0 -= NB) {
    float pre[NB];
    CUTE_UNROLL
    for (int j = 0; j < NB; ++j) pre[j] = t0 + j < rows ? dg[(t0 + j) * rowK] : 0.f;
    CUTE_UNROLL
    for (int j = NB - 1; j >= 0; --j) {
      const int t = t0 + j;
      suffix += stK[bIndex<KB>(t, c)];
      if (t < rows) {
        const float x = (z + suffix) + pre[j];
        dg[t * rowK] = excl ? x - stP[bIndex<KB>(t, c)] : x;
      }
    }
  }
}

}  // namespace linac::kernels::cuda::hopper
