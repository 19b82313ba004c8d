// Hopper backward of the delta rule, stage 2 (forward state pass): one CTA (one warpgroup) per
// (block of BV value columns, head, sequence) walks the chunks in order with the fp32 state block
// S [dk, BV] as the accumulator of the product that updates it (state_output.cuh without the
// output). Per chunk c, with W, U from stage 1 and b the chunk's cumulative log-decay:
//   states[c] = S_c                                      (input dtype, as fla stores h)
//   D   = U - W S_c                                       fp32, written over U (fla's v_new)
//   S  <- exp(b_last) S + K^T (diag(exp(b_last - b)) D)
// W S reads S's bf16 copy (the forward's rounding). At dk <= 128, K^T D reads D exp(b_last - b)
// as hi + lo in the input dtype (two wgmma): rounded once, as the forward rounds it, it took the
// bf16 dg of one draw in ~400 to 1.2e-2 (gate 5e-3) at the lab's T130 dk64 dv64 g >= -5 case
// (host transcription, 800 draws). At dk 256 the second product's operands spilled this kernel
// (+4% on Gated DeltaNet's 340m backward) and the transcription's dg did not move with it
// (delta_bwd_host_check.py, kernel_precise), so there D is rounded once. The next chunk's
// W and K (tensor-map copies, tma.cuh), U and g (cp.async) land in the other of two stages on its
// mbarrier while this one computes (U read from global memory inside the chunk stalled the
// no-decay instantiation: ptxas placed those loads between the W S wgmma and their use, ~2.7x the
// scalar decay's stage time under ncu).
#pragma once

#include "delta_bwd_common.cuh"
#include "delta_bwd_params.h"

namespace linac::kernels::cuda::hopper {

template <class T, int DK, int BV>
struct DeltaBwdForwardStateTiles {
  static constexpr int C = kChunk;
  using Wk = RowTile<T, C, DK, 2>;          // w, k: [t, d], two stages
  using Kt = Transposed<Wk, C, DK, 2>;      // k as (d, t)
  using Xs = ColTile<T, BV, C>;             // D exp(b_last - b): (v, t)
  using S = ColTile<T, BV, DK>;             // S: (v, d)
  using MmaWS = WarpgroupMma<T, C, BV, DK, GMMA::Major::K, GMMA::Major::MN>;   // W S
  using MmaKX = WarpgroupMma<T, DK, BV, C, GMMA::Major::MN, GMMA::Major::MN>;  // K^T X
  static constexpr bool kLowHalf = DK <= 128;  // D's low half in K^T D (the header)

  // U rows of BV fp32, padded so the accumulator layout's (row, column pair) reads are
  // conflict-free per half-warp (four rows of 8 words land on four distinct bank octets).
  static constexpr int kLdU = BV + 8;
  struct Smem {
    alignas(1024) T w[cosize_v<Wk>];
    alignas(1024) T k[cosize_v<Wk>];
    alignas(1024) T xs[cosize_v<Xs>];
    alignas(1024) T xsLo[cosize_v<Xs>];  // read at dk <= 128 only (kLowHalf)
    alignas(1024) T s[cosize_v<S>];
    alignas(16) float u[2][C * kLdU];
    float g[2][C];
    double b[C];
    uint64_t loaded[2];  // a stage's copies have landed
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

template <class T, int DK, int BV, class Decay>
__global__ void __launch_bounds__(kWarpgroupThreads, 2)
    deltaBwdForwardStateKernel(const DeltaBackwardParams p, const __grid_constant__ DeltaStateMaps maps) {
  using Tiles = DeltaBwdForwardStateTiles<T, DK, BV>;
  using MmaWS = typename Tiles::MmaWS;
  using MmaKX = typename Tiles::MmaKX;
  constexpr int C = Tiles::C;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  const int tid = threadIdx.x;
  const int h = blockIdx.y, n = blockIdx.z, H = p.heads, DV = p.value_dim, v0 = blockIdx.x * BV;
  int64_t bos, len, coff;
  seqInfo<C>(p, n, bos, len, coff);
  const int numChunks = int((len + C - 1) / C);
  const int64_t rowV = int64_t(H) * DV;
  T* states = static_cast<T*>(p.states);

  const auto tW = smemTile(sm.w, typename Tiles::Wk{});    // (C, DK, 2)
  const auto tK = smemTile(sm.k, typename Tiles::Wk{});    // (C, DK, 2)
  const auto tKt = smemTile(sm.k, typename Tiles::Kt{});   // (DK, C, 2)
  const auto tXs = smemTile(sm.xs, typename Tiles::Xs{});  // (BV, C)
  const auto tXsLo = smemTile(sm.xsLo, typename Tiles::Xs{});
  const auto tS = smemTile(sm.s, typename Tiles::S{});     // (BV, DK)

  MmaWS mmaWS;
  MmaKX mmaKX;
  auto thrWS = mmaWS.get_thread_slice(tid);
  auto thrKX = mmaKX.get_thread_slice(tid);
  Tensor fW = thrWS.partition_fragment_A(tW.tensor());  // (MMA, M, K, stage)
  Tensor fS = thrWS.partition_fragment_B(tS.tensor()(_, _, 0));
  Tensor fKt = thrKX.partition_fragment_A(tKt.tensor());
  Tensor fXs = thrKX.partition_fragment_B(tXs.tensor()(_, _, 0));
  Tensor fXsLo = thrKX.partition_fragment_B(tXsLo.tensor()(_, _, 0));
  Tensor accX = partition_fragment_C(mmaWS, Shape<Int<C>, Int<BV>>{});
  Tensor accS = partition_fragment_C(mmaKX, Shape<Int<DK>, Int<BV>>{});
  const auto cX = accCoords<C, BV>(mmaWS);
  const auto cS = accCoords<DK, BV>(mmaKX);

  auto publishState = [&] {  // S's copy in the input dtype, (v, d) pairs from the accumulator
    forEachPair<MmaKX>(cS, [&](int i, int d, int v) {
      sts32(tS.at(v, d), pack2<T>(accS(i), accS(i + 1)));
    });
  };
  const int64_t stateOffset = (int64_t(n) * H + h) * DK * DV + v0;  // [N, H, dk, dv]
  forEachPair<MmaKX>(cS, [&](int i, int d, int v) {
    const float* h0 = p.h0 + stateOffset + int64_t(d) * DV + v;
    accS(i) = p.h0 ? h0[0] : 0.f;
    accS(i + 1) = p.h0 ? h0[1] : 0.f;
  });
  publishState();

  auto rowsOf = [&](int c) { return int(len - int64_t(c) * C < C ? len - int64_t(c) * C : C); };
  constexpr int kLdU = Tiles::kLdU, kUVecs = BV / 4;  // 16-byte vectors per U row
  const auto origin = tokenMapOrigin<C>(p, n, bos);  // chunk c at (origin.chunk(c), origin.seq) of the maps
  // Thread 0 announces and issues W's and K's boxes; every thread arrives once its cp.async
  // copies (U, g) have landed.
  auto loadChunk = [&](int c, int stage) {
    uint64_t* bar = &sm.loaded[stage];
    const int64_t tok0 = bos + int64_t(c) * C;
    const int rows = rowsOf(c);
    if (tid == 0) {
      barrierExpectBytes(bar, 2 * C * DK * sizeof(T));
      bulkLoadTile4d<false, C, DK>(tW, stage, &maps.w, 0, h, origin.chunk(c), origin.seq, bar);
      bulkLoadTile4d<false, C, DK>(tK, stage, &maps.k, 0, h, origin.chunk(c), origin.seq, bar);
    }
    const float* ud = p.ud + tok0 * rowV + int64_t(h) * DV + v0;  // [t, BV] of [B, T, H, dv]
    for (int i = tid; i < C * kUVecs; i += kWarpgroupThreads) {
      const int t = i / kUVecs, v = (i % kUVecs) * 4;
      const bool valid = t < rows;
      copy16(static_cast<uint32_t>(__cvta_generic_to_shared(&sm.u[stage][t * kLdU + v])),
             ud + (valid ? t * rowV + v : 0), valid);
    }
    stageLogDecay<Decay>(sm.g[stage], p.g, tok0, rows, h, H);
    copyArrive(bar);
  };
  if (tid == 0) {
    barrierInit(&sm.loaded[0], kWarpgroupThreads);
    barrierInit(&sm.loaded[1], kWarpgroupThreads);
  }
  __syncthreads();  // the mbarriers exist before any thread arrives
  if (numChunks > 0) loadChunk(0, 0);

  for (int c = 0; c < numChunks; ++c) {
    const int stage = c & 1, rows = rowsOf(c);
    const int64_t tok0 = bos + int64_t(c) * C;
    barrierWait(&sm.loaded[stage], uint32_t(c >> 1) & 1u);  // the stage's (c / 2)-th fill
    if (p.cu_seqlens != nullptr && rows < C) {  // a packed batch's boxes ran into the next sequence
      zeroRows<false, C, DK, kWarpgroupThreads>(tW, stage, rows);
      zeroRows<false, C, DK, kWarpgroupThreads>(tK, stage, rows);
    }
    fenceToAsyncProxy();  // this chunk's tiles and S's copy, for the tensor cores
    __syncthreads();      // ... and every thread is done with the other stage
    if (c + 1 < numChunks) loadChunk(c + 1, stage ^ 1);
    if (tid < 32) chunkCumsumDouble<Decay>(sm.b, sm.g[stage]);

    T* slot = states + ((coff + c) * H + h) * int64_t(DK) * DV + v0;  // states[c] = S_c
    forEachPair<MmaKX>(cS, [&](int i, int d, int v) {
      *reinterpret_cast<uint32_t*>(slot + int64_t(d) * DV + v) = pack2<T>(accS(i), accS(i + 1));
    });
    float* ud = p.ud + tok0 * rowV + int64_t(h) * DV + v0;
    issue(accX);
    gemm<true>(mmaWS, fW(_, _, _, stage), fS, accX);
    commitAndWait(accX);
    __syncthreads();  // b

    forEachPair<MmaWS>(cX, [&](int i, int t, int v) {
      const float2 u = *reinterpret_cast<const float2*>(&sm.u[stage][t * kLdU + v]);  // 0 past the end
      const float d0 = u.x - accX(i), d1 = u.y - accX(i + 1);
      if (t < rows) *reinterpret_cast<float2*>(ud + t * rowV + v) = make_float2(d0, d1);
      const float f = decayTo<Decay>(sm.b, t);
      if constexpr (Tiles::kLowHalf) {
        uint32_t hi, lo;
        splitPack2<T>(d0 * f, d1 * f, hi, lo);
        sts32(tXs.at(v, t), hi);
        sts32(tXsLo.at(v, t), lo);
      } else {
        sts32(tXs.at(v, t), pack2<T>(d0 * f, d1 * f));
      }
    });
    if constexpr (Decay::kActive) {
      const float fLast = decayFrom<Decay>(sm.b, C - 1);
      CUTE_UNROLL
      for (int i = 0; i < size(accS); ++i) accS(i) *= fLast;
    }
    fenceToAsyncProxy();
    __syncthreads();

    issue(accS);
    gemm<false>(mmaKX, fKt(_, _, _, stage), fXs, accS);
    if constexpr (Tiles::kLowHalf) gemm<false>(mmaKX, fKt(_, _, _, stage), fXsLo, accS);
    commitAndWait(accS);
    publishState();  // every read of S_c completed before the barrier above
  }
}

}  // namespace linac::kernels::cuda::hopper
