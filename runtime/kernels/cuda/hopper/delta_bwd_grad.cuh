// Hopper backward of the delta rule, stage 4 (chunk-parallel gradients): one CTA of three
// warpgroups per (chunk slot, head), from the state passes' S_c, dS_{c+1}, D and dD. With b the
// chunk's cumulative log-decay and Gam_ts = exp(b_t - b_s) (s <= t):
//   dA' = scale (dO D^T) . Gam                                    lower incl.         warpgroup 0
//   dq  = scale diag(exp b) dO S_c^T + dA' K                       (final)             warpgroup 0
//   dk  = diag(exp(b_last - b)) D dS_{c+1}^T + dA'^T Q             (part, fp32)        warpgroup 1
//   dW  = -dD S_c^T                                                (input dtype)       warpgroup 2
// and, for a scalar decay with dg wanted, the first parts of dg (the rest in stage 5):
//   db_t = q_t . dq_t - k_t . dk_t,   Z = exp(b_last) <S_c, dS_{c+1}> + sum_s k_s . dk_Kd_s
// with dk_Kd the first term of dk. Value blocks of VB columns stream through shared memory (the
// products' reduction runs over v), the accumulators stay in registers across them. D and dS_{c+1}
// enter D dS^T as hi + lo (three wgmma) and D enters dO D^T as hi + lo (two): with either rounded
// to bf16 the host transcription measured dg at 3.7e-3..8.5e-3 (gate 5e-3). dA' enters dA' K and
// dA'^T Q as hi + lo (two wgmma each): rounded once it set most of the bf16 dg's error (the
// transcription's gated cases: dg 1.7e-3..2.3e-3 -> 1.7e-4..1.8e-4, dq 2.2e-3 -> 1.6e-3). S_c and
// dD enter in the input dtype, except a sequence's first state S_0 = h0 in <S_c, dS_{c+1}>, read
// in fp32.
// Every output is written once (no atomics): row dots by quad shuffles.
// The value blocks are pipelined: block j + 1's dO and S_c (double-buffered tiles) and its fp32
// dS_{c+1}, D and dD (a staging buffer, split into the tiles in shared memory) arrive while block
// j's products run, as tensor-map copies (tma.cuh) issued by thread 0 on one mbarrier; a packed
// sequence's partial chunk has its rows past the end zeroed after the copy.
// Key dims above 128 run in key blocks of 128 columns (grid z): each accumulator is [C, KB] fp32,
// 64 registers a thread at KB = 128 where dk 256 would take 128 (the CTA's cap is 168). A key block
// reads q, k, S_c and dS_{c+1} in its columns / rows only and recomputes dA' (a C x C product, the
// same in every block; only warpgroup 0 of each block uses it). The dg parts (row dots, <S_c,
// dS_{c+1}>) are sums over d, so each key block writes its own part and stage 5 adds them in order.
#pragma once

#include "delta_bwd_common.cuh"
#include "delta_bwd_params.h"

namespace linac::kernels::cuda::hopper {

constexpr int kDeltaGradThreads = 3 * kWarpgroupThreads;

/// Key columns per CTA of the gradient stage, and how many key blocks make dk.
template <int DK>
constexpr int deltaGradKeyBlock() { return DK < 128 ? DK : 128; }
template <int DK>
constexpr int deltaGradKeyBlocks() { return DK / deltaGradKeyBlock<DK>(); }

template <class T, int DK>
struct DeltaBwdGradTiles {
  static constexpr int C = kChunk;
  static constexpr int VB = 64;             // value columns per block of the loop
  static constexpr int KB = deltaGradKeyBlock<DK>();  // key columns of this CTA
  // Tensor maps (tma.cuh): q, k as (64, 1, C, 1) boxes and d_o, D (ud), dD (dd) as (VB, 1, C, 1) of
  // [sequences, tokens, H, width]; S_c and dS_{c+1} as (VB, KB) boxes of their [slots H dk, dv] rows.
  struct Maps {
    CUtensorMap q, k, d_o, ud, dd, s, ds;
  };
  using Qk = RowTile<T, C, KB>;             // q, k: [t, d]
  using QkT = Transposed<Qk, C, KB>;        // (d, t)
  using Tv = RowTile<T, C, VB>;             // D (hi, lo), dD: [t, v]
  using Tv2 = RowTile<T, C, VB, 2>;         // d_o, two value blocks
  using Sv = RowTile<T, KB, VB>;            // dS_{c+1} (hi, lo): [d, v]
  using Sv2 = RowTile<T, KB, VB, 2>;        // S_c, two value blocks
  using Sq = RowTile<T, C, C>;              // dA' (hi, lo): [t, s]
  using SqT = Transposed<Sq, C, C>;         // (s, t)

  using MmaOD = WarpgroupMma<T, C, C, VB, GMMA::Major::K, GMMA::Major::K>;     // dO D^T
  using MmaXS = WarpgroupMma<T, C, KB, VB, GMMA::Major::K, GMMA::Major::K>;    // dO S^T, D dS^T, dD S^T
  using MmaAK = WarpgroupMma<T, C, KB, C, GMMA::Major::K, GMMA::Major::MN>;    // dA' K
  using MmaAtQ = WarpgroupMma<T, C, KB, C, GMMA::Major::MN, GMMA::Major::MN>;  // dA'^T Q

  struct Smem {
    alignas(1024) T q[cosize_v<Qk>];
    alignas(1024) T k[cosize_v<Qk>];
    alignas(1024) T o[cosize_v<Tv2>];
    alignas(1024) T dHi[cosize_v<Tv>];
    alignas(1024) T dLo[cosize_v<Tv>];
    alignas(1024) T dd[cosize_v<Tv>];
    alignas(1024) T s[cosize_v<Sv2>];
    alignas(1024) T dsHi[cosize_v<Sv>];
    alignas(1024) T dsLo[cosize_v<Sv>];
    alignas(1024) T da[cosize_v<Sq>];
    alignas(1024) T daLo[cosize_v<Sq>];
    alignas(128) float stageDs[KB * VB];  // the next value block's fp32 dS_{c+1}, D, dD
    alignas(128) float stageD[C * VB];
    alignas(128) float stageDd[C * VB];
    float g[C];
    double b[C];
    float rowQ[C];    // q_t . dq_t
    float rowK[C];    // k_t . dk_t
    float rowKd[C];   // k_t . dk_Kd_t
    float dot[kWarpgroupThreads / 32];  // <S_c, dS_{c+1}> per warp of warpgroup 2
    uint64_t chunkLoaded;  // q, k, g have landed
    uint64_t blockLoaded;  // a value block's copies have landed
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DK, class Decay>
__global__ void __launch_bounds__(kDeltaGradThreads, 1)
    deltaBwdGradKernel(const DeltaBackwardParams p, const __grid_constant__ typename DeltaBwdGradTiles<T, DK>::Maps maps) {
  using Tiles = DeltaBwdGradTiles<T, DK>;
  using MmaXS = typename Tiles::MmaXS;
  using MmaOD = typename Tiles::MmaOD;
  constexpr int C = Tiles::C, VB = Tiles::VB, KB = Tiles::KB, kThreads = kDeltaGradThreads;
  constexpr int kKeyBlocks = deltaGradKeyBlocks<DK>();
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  int n;
  int64_t bos, len, chunk, coff;
  if (!slotToChunk<C>(p, int64_t(blockIdx.x), n, bos, len, chunk, coff)) return;
  const int tid = threadIdx.x, wg = tid / kWarpgroupThreads, wtid = tid % kWarpgroupThreads;
  const int h = blockIdx.y, H = p.heads, DV = p.value_dim, kb = blockIdx.z;
  const int64_t tok0 = bos + chunk * C;
  const int rows = int(len - chunk * C < C ? len - chunk * C : C);
  const int64_t rowK = int64_t(H) * DK;
  // this key block's columns of q, k, dq, dk, dW and rows of S_c, dS_{c+1}
  const int64_t offK = tok0 * rowK + int64_t(h) * DK + kb * KB;
  // the maps' (token, sequence) of the chunk, and its first row of S_c / dS_{c+1} [slots H dk, dv]
  const auto origin = tokenMapOrigin<C>(p, n, bos);
  const int mapToken = origin.chunk(chunk), mapSeq = origin.seq;  // this chunk in the maps
  const int stateRow = int(((coff + chunk) * H + h) * DK + kb * KB);
  const bool wantDg = Decay::kClass == DecayClass::Scalar && p.dbpart != nullptr;

  const auto tQ = smemTile(sm.q, typename Tiles::Qk{});
  const auto tQt = smemTile(sm.q, typename Tiles::QkT{});
  const auto tK = smemTile(sm.k, typename Tiles::Qk{});
  const auto tKt = smemTile(sm.k, typename Tiles::QkT{});
  const auto tO = smemTile(sm.o, typename Tiles::Tv2{});
  const auto tDHi = smemTile(sm.dHi, typename Tiles::Tv{});
  const auto tDLo = smemTile(sm.dLo, typename Tiles::Tv{});
  const auto tDd = smemTile(sm.dd, typename Tiles::Tv{});
  const auto tS = smemTile(sm.s, typename Tiles::Sv2{});
  const auto tDSHi = smemTile(sm.dsHi, typename Tiles::Sv{});
  const auto tDSLo = smemTile(sm.dsLo, typename Tiles::Sv{});
  const auto tA = smemTile(sm.da, typename Tiles::Sq{});
  const auto tAt = smemTile(sm.da, typename Tiles::SqT{});
  const auto tALo = smemTile(sm.daLo, typename Tiles::Sq{});
  const auto tAtLo = smemTile(sm.daLo, typename Tiles::SqT{});

  // Value block v0's copies: thread 0 announces and issues the boxes, every thread arrives.
  constexpr uint32_t kBlockBytes = (C * VB + KB * VB) * sizeof(T) + (KB * VB + 2 * C * VB) * sizeof(float);
  auto stageBlock = [&](int v0) {
    uint64_t* bar = &sm.blockLoaded;
    if (tid == 0) {
      const int buf = (v0 / VB) & 1;
      barrierExpectBytes(bar, kBlockBytes);
      bulkLoadTile4d<false, C, VB>(tO, buf, &maps.d_o, v0, h, mapToken, mapSeq, bar);
      bulkLoadTile2d<false, KB, VB>(tS, buf, &maps.s, v0, stateRow, bar);
      bulkLoad2d(sharedAddress(sm.stageDs), &maps.ds, v0, stateRow, bar);
      bulkLoad4d(sharedAddress(sm.stageD), &maps.ud, v0, h, mapToken, mapSeq, bar);
      bulkLoad4d(sharedAddress(sm.stageDd), &maps.dd, v0, h, mapToken, mapSeq, bar);
    }
    copyArrive(bar);
  };
  // A packed sequence's partial chunk: its boxes ran into the next sequence's tokens.
  const bool partial = p.cu_seqlens != nullptr && rows < C;
  auto zeroStaged = [&](float* staged) {  // rows [rows, C) of a dense [C, VB] fp32 buffer
    for (int e = rows * VB / 4 + tid; e < C * VB / 4; e += kThreads)
      reinterpret_cast<float4*>(staged)[e] = make_float4(0.f, 0.f, 0.f, 0.f);
  };
  if (tid == 0) {
    barrierInit(&sm.chunkLoaded, kThreads);
    barrierInit(&sm.blockLoaded, kThreads);
  }
  __syncthreads();  // the mbarriers exist before any thread arrives
  if (tid == 0) {
    barrierExpectBytes(&sm.chunkLoaded, 2 * C * KB * sizeof(T));
    bulkLoadTile4d<false, C, KB>(tQ, 0, &maps.q, kb * KB, h, mapToken, mapSeq, &sm.chunkLoaded);
    bulkLoadTile4d<false, C, KB>(tK, 0, &maps.k, kb * KB, h, mapToken, mapSeq, &sm.chunkLoaded);
  }
  stageLogDecay<Decay>(sm.g, p.g, tok0, rows, h, H);
  copyArrive(&sm.chunkLoaded);
  stageBlock(0);

  MmaXS mmaXS;
  auto thrXS = mmaXS.get_thread_slice(wtid);
  Tensor accX = partition_fragment_C(mmaXS, Shape<Int<C>, Int<KB>>{});  // dq (0), dk (1), -dW (2)
  const auto cX = accCoords<C, KB>(mmaXS);
  MmaOD mmaOD;
  Tensor accA = partition_fragment_C(mmaOD, Shape<Int<C>, Int<C>>{});   // dO D^T (0)
  // Operand descriptors are made where they are used (inside each warpgroup's branch), so none is
  // live across the others' code: the CTA runs at the 168-register limit of 384 threads.
  auto fragA = [&](const auto& tile) { return thrXS.partition_fragment_A(tile.tensor()(_, _, 0)); };
  auto fragB = [&](const auto& tile) { return thrXS.partition_fragment_B(tile.tensor()(_, _, 0)); };
  float dot = 0.f;  // warpgroup 2: this thread's part of <S_c, dS_{c+1}>
  clear(accA);      // the value blocks accumulate from zero
  clear(accX);

  for (int v0 = 0; v0 < DV; v0 += VB) {
    const int buf = (v0 / VB) & 1;
    barrierWait(&sm.blockLoaded, uint32_t(v0 / VB) & 1u);
    if (v0 == 0) barrierWait(&sm.chunkLoaded, 0);
    if (partial) {
      if (v0 == 0) {
        zeroRows<false, C, KB, kThreads>(tQ, 0, rows);
        zeroRows<false, C, KB, kThreads>(tK, 0, rows);
      }
      zeroRows<false, C, VB, kThreads>(tO, buf, rows);
      zeroStaged(sm.stageD);
      zeroStaged(sm.stageDd);
    }
    __syncthreads();  // this block's copies landed; every product of the previous block done
    {
      const int ltid = threadIndexHere();
      splitStagedRows<KB, VB, VB, kThreads, true>(tDSHi, tDSLo, sm.stageDs, ltid);
      splitStagedRows<C, VB, VB, kThreads, true>(tDHi, tDLo, sm.stageD, ltid);
      splitStagedRows<C, VB, VB, kThreads, false>(tDd, tDd, sm.stageDd, ltid);
    }
    fenceToAsyncProxy();
    __syncthreads();  // the tiles; the staging buffers read
    if (v0 + VB < DV) stageBlock(v0 + VB);
    if (wg == 0) {
      auto thrOD = mmaOD.get_thread_slice(wtid);
      Tensor fO = thrOD.partition_fragment_A(tO.tensor()(_, _, buf));
      issue(accA, accX);
      gemm<false>(mmaOD, fO, thrOD.partition_fragment_B(tDHi.tensor()(_, _, 0)), accA);
      gemm<false>(mmaOD, fO, thrOD.partition_fragment_B(tDLo.tensor()(_, _, 0)), accA);
      gemm<false>(mmaXS, thrXS.partition_fragment_A(tO.tensor()(_, _, buf)),
                  thrXS.partition_fragment_B(tS.tensor()(_, _, buf)), accX);
      commitAndWait(accA, accX);
    } else if (wg == 1) {
      Tensor fDHi = fragA(tDHi);
      Tensor fDSHi = fragB(tDSHi);
      issue(accX);
      gemm<false>(mmaXS, fDHi, fDSHi, accX);
      gemm<false>(mmaXS, fragA(tDLo), fDSHi, accX);
      gemm<false>(mmaXS, fDHi, fragB(tDSLo), accX);
      commitAndWait(accX);
    } else {
      issue(accX);
      gemm<false>(mmaXS, fragA(tDd), thrXS.partition_fragment_B(tS.tensor()(_, _, buf)), accX);
      commitAndWait(accX);
      if (wantDg) {  // <S_c, dS_{c+1}> over this block, 16-byte vectors of the three tiles
        // A sequence's first chunk takes S_0 = h0 in fp32 from the input: rounded to the input
        // dtype it was most of dg's error (host check: 12% of draws above the 5e-3 gate at dk 256
        // x dv 512 with short sequences, none with h0 exact).
        const float* h0 = chunk == 0 && p.h0 != nullptr  // [N, H, dk, dv]: this key block's rows
                              ? p.h0 + (int64_t(n) * H + h) * DK * DV + int64_t(kb) * KB * DV + v0
                              : nullptr;
        for (int idx = wtid; idx < KB * VB / 8; idx += kWarpgroupThreads) {
          const int d = idx / (VB / 8), v = (idx % (VB / 8)) * 8;
          const uint4 bh = lds128(tDSHi.at(d, v)), bl = lds128(tDSLo.at(d, v));
          const uint32_t* wh = reinterpret_cast<const uint32_t*>(&bh);
          const uint32_t* wl = reinterpret_cast<const uint32_t*>(&bl);
          float x[8];
          if (h0 != nullptr) {
            CUTE_UNROLL
            for (int j = 0; j < 8; ++j) x[j] = __ldg(h0 + int64_t(d) * DV + v + j);
          } else {
            const uint4 a = lds128(tS.at(d, v, buf));
            const uint32_t* wa = reinterpret_cast<const uint32_t*>(&a);
            CUTE_UNROLL
            for (int j = 0; j < 4; ++j) {
              const float2 pair = unpack2<T>(wa[j]);
              x[2 * j] = pair.x;
              x[2 * j + 1] = pair.y;
            }
          }
          CUTE_UNROLL
          for (int j = 0; j < 4; ++j) {
            const float2 yh = unpack2<T>(wh[j]), yl = unpack2<T>(wl[j]);
            dot += x[2 * j] * (yh.x + yl.x) + x[2 * j + 1] * (yh.y + yl.y);
          }
        }
      }
    }
  }
  if (tid < 32) chunkCumsumDouble<Decay>(sm.b, sm.g);
  __syncthreads();  // b; every read of the value blocks done

  // Row dots of accX with a [t, d] tile into out[] (tiles.cuh)
  auto rowDots = [&](const auto& tile, float* out) { accRowDots<MmaXS>(cX, accX, tile, 0, out); };

  if (wg == 0) {
    forEachPair<MmaOD>(accCoords<C, C>(mmaOD), [&](int i, int t, int s) {
      const float f0 = p.scale * decayRatio<Decay>(sm.b, t, s);
      const float f1 = p.scale * decayRatio<Decay>(sm.b, t, s + 1);
      uint32_t hi, lo;
      splitPack2<T>(accA(i) * f0, accA(i + 1) * f1, hi, lo);
      sts32(tA.at(t, s), hi);
      sts32(tALo.at(t, s), lo);
    });
    forEachPair<MmaXS>(cX, [&](int i, int t, int) {
      const float f = p.scale * decayFrom<Decay>(sm.b, t);
      accX(i) *= f;
      accX(i + 1) *= f;
    });
  } else if (wg == 1) {
    forEachPair<MmaXS>(cX, [&](int i, int s, int) {
      const float f = decayTo<Decay>(sm.b, s);
      accX(i) *= f;
      accX(i + 1) *= f;
    });
    if (wantDg) rowDots(tK, sm.rowKd);
  } else {
    T* dw = static_cast<T*>(p.dw) + offK;
    forEachPair<MmaXS>(cX, [&](int i, int t, int d) {
      if (t < rows) *reinterpret_cast<uint32_t*>(dw + t * rowK + d) = pack2<T>(-accX(i), -accX(i + 1));
    });
    if (wantDg) {
      CUTE_UNROLL
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if ((wtid & 31) == 0) sm.dot[wtid / 32] = dot;
    }
  }
  fenceToAsyncProxy();
  __syncthreads();  // dA'

  if (wg == 0) {
    typename Tiles::MmaAK mma;
    auto thr = mma.get_thread_slice(wtid);
    issue(accX);
    const auto fKt = thr.partition_fragment_B(tKt.tensor()(_, _, 0));
    gemm<false>(mma, thr.partition_fragment_A(tA.tensor()(_, _, 0)), fKt, accX);
    gemm<false>(mma, thr.partition_fragment_A(tALo.tensor()(_, _, 0)), fKt, accX);
    commitAndWait(accX);
    if (wantDg) rowDots(tQ, sm.rowQ);
    if (p.dq) {
      T* dq = static_cast<T*>(p.dq) + offK;
      forEachPair<MmaXS>(cX, [&](int i, int t, int d) {
        if (t < rows) *reinterpret_cast<uint32_t*>(dq + t * rowK + d) = pack2<T>(accX(i), accX(i + 1));
      });
    }
  } else if (wg == 1) {
    typename Tiles::MmaAtQ mma;
    auto thr = mma.get_thread_slice(wtid);
    issue(accX);
    const auto fQt = thr.partition_fragment_B(tQt.tensor()(_, _, 0));
    gemm<false>(mma, thr.partition_fragment_A(tAt.tensor()(_, _, 0)), fQt, accX);
    gemm<false>(mma, thr.partition_fragment_A(tAtLo.tensor()(_, _, 0)), fQt, accX);
    commitAndWait(accX);
    if (wantDg) rowDots(tK, sm.rowK);
    float* dk = p.dkpart + offK;
    forEachPair<MmaXS>(cX, [&](int i, int t, int d) {
      if (t < rows) *reinterpret_cast<float2*>(dk + t * rowK + d) = make_float2(accX(i), accX(i + 1));
    });
  }
  if (!wantDg) return;
  __syncthreads();  // row dots, <S_c, dS_{c+1}>
  // this key block's parts: dbpart [B, T, H, key blocks], zpart [slots, H, key blocks]
  if (tid < C && tid < rows) p.dbpart[((tok0 + tid) * H + h) * kKeyBlocks + kb] = sm.rowQ[tid] - sm.rowK[tid];
  if (tid < 32) {  // warp 0: sum_t k_t . dk_Kd_t by a fixed shuffle tree
    float kd = sm.rowKd[tid] + sm.rowKd[tid + 32];
    CUTE_UNROLL
    for (int o = 16; o > 0; o >>= 1) kd += __shfl_xor_sync(0xffffffffu, kd, o);
    if (tid == 0) {
      float z = 0.f;
      for (int w = 0; w < kWarpgroupThreads / 32; ++w) z += sm.dot[w];
      p.zpart[(int64_t(blockIdx.x) * H + h) * kKeyBlocks + kb] = decayFrom<Decay>(sm.b, C - 1) * z + kd;
    }
  }
}

}  // namespace linac::kernels::cuda::hopper
