// Hopper backward of the additive rule with a DIAGONAL decay (GLA, HGRN-2, RWKV-6), the state
// passes: chunk_backward_diagonal.cu's pass 1 (chunk_backward_diagonal_scan.cu) on wgmma, for
// 16-bit inputs at dk in {64, 128, 256}.
// It writes the workspaces the gradient stage (diag_key_grad.cuh, diag_value_grad.cuh) reads, one
// row per chunk slot, in the input dtype (that stage rounds them to it as wgmma operands anyway;
// half the bytes of fp32 both ways):
//   forward:  S = h0;    per chunk c = 0, 1, ...:      states[c]  = S,
//             S <- diag(e^B) S + (K . e^{B - b})^T V
//   reverse:  dS = d_ht; per chunk c = last, ..., 0:   dstates[c] = dS,
//             dS <- diag(e^B) dS + (scale Q . e^{bq})^T dO;        d_h0 = dS at the end
// with, per key channel, b_t the chunk's inclusive cumulative log-decay, B = b_{C-1} and bq_t = b_t
// (inclusive readout) or b_{t-1} (exclusive, b_{-1} = 0). Each exponent is summed in fp32 from its
// own end, B - b_t = sum_{u > t} g_u downward and bq_t upward, so its rounding scales with its own
// size (strong gates: the large sums only ever make factors that underflow to 0).
//
// One CTA (one warpgroup) per (block of BV value columns, head, sequence x direction), both
// directions in one launch. The state is the wgmma accumulator [DK, BV] in fp32. Per chunk: X (k
// or q) and Y (v or d_o) arrive one chunk ahead, the log-decays g once this chunk's are used (one
// stage: two CTAs fit an SM at dk <= 128), each group by tensor-map copies (tma.cuh) on its
// mbarrier (rows past a packed sequence's end zeroed after the copy); a thread per (channel, token
// range) -- at dk 256 a thread per two channels, every token -- sums its channel's g, forms the
// per-token factors and scales X in place (the 16-bit A operand, read through its transposed
// view); the state rows are scaled by e^B and the product X^T Y accumulates on the tensor cores.
// Long sequences with few heads, whose grid leaves SMs idle: in segments (runDiagStateScanSegments),
// each run of a segment's chunks from zero state for its end state E_j and log-decay G_j, a scan
// over segments for each run's true start, then the runs again from those, so each pass's chain
// is a segment long:  S_start(j + 1) = e^{G_j} . S_start(j) + E_j  (forward; reverse alike).
#pragma once

#include "../chunk_slots.cuh"
#include "../cuda_check.h"
#include "../device_info.h"
#include "../workspace.h"
#include "diag_grad_params.h"
#include "env_switch.h"
#include "state_scan.cuh"

#include <algorithm>

namespace linac::kernels::cuda::hopper {

constexpr int kDiagScanValueBlock = 64;  // value columns per CTA (half where the grid is small)
constexpr int kSegmentStartThreads = 256;  // threads per CTA of the scan over segments

template <class T, int DK, int BV>
struct DiagStateScanTiles {
  static constexpr int C = kChunk;
  using Base = StateScanTiles<T, DK, BV>;  // the additive state passes' operand tiles and product
  using X = typename Base::X;              // k or q [t, d], two stages; scaled in place
  using Xt = typename Base::Xt;
  using Y = typename Base::Y;              // v or d_o (v, t), two stages
  using Mma = typename Base::Mma;          // [DK, BV] += X^T Y
  static constexpr int kChannels = DK > kWarpgroupThreads ? DK / kWarpgroupThreads : 1;  // per thread
  static constexpr int kParts = kWarpgroupThreads * kChannels / DK;  // threads per channel
  static constexpr int kSpan = C / kParts;                            // tokens per thread
  static_assert(kParts * DK == kWarpgroupThreads * kChannels && kParts * kSpan == C,
                "whole channels per thread, or a channel per thread group");

  // Tensor maps (tma.cuh), by direction: x (k, q) as (DK, 1, C, 1) boxes, y (v, d_o) as (BV, 1,
  // C, 1), g as whole (DK, 1, C, 1) fp32 rows, each of [sequences, tokens, H, width].
  struct Maps {
    CUtensorMap k, q, v, d_o, g;
  };

  struct Smem {
    alignas(1024) T x[cosize_v<X>];
    alignas(1024) T y[cosize_v<Y>];
    alignas(128) float g[C * DK];  // log-decays [t][c]
    float eB[DK];                // e^B per channel
    float part[kParts][DK];      // each token range's sum of g (kParts > 1)
    uint64_t tilesLoaded[2];     // a stage's x and y have landed
    uint64_t decaysLoaded;       // g has landed
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

/// kEndsOnly (segments, the first of their two passes): each run from zero state, writing only its
/// end state and, forward, its total log-decay per channel, for diagSegmentStartKernel's scan.
template <class T, int DK, int BV, bool kEndsOnly>
__global__ void __launch_bounds__(kWarpgroupThreads)
    diagStateScanKernel(const DiagGradParams p, const __grid_constant__ typename DiagStateScanTiles<T, DK, BV>::Maps maps) {
  using Tiles = DiagStateScanTiles<T, DK, BV>;
  using Mma = typename Tiles::Mma;
  constexpr int C = Tiles::C, kParts = Tiles::kParts, kSpan = Tiles::kSpan, kChannels = Tiles::kChannels;
  extern __shared__ __align__(16) uint8_t smemRaw[];
  auto& sm = alignedSmem<typename Tiles::Smem>(smemRaw);

  const int tid = threadIdx.x;
  const int H = p.heads, DV = p.value_dim, h = blockIdx.y, v0 = blockIdx.x * BV;
  const int S = p.segments > 1 ? p.segments : 1, runs = p.num_seqs * S;  // runs: segments of sequences
  const bool reverse = int(blockIdx.z) >= runs, excl = p.exclusive != 0;
  const int r = reverse ? int(blockIdx.z) - runs : int(blockIdx.z), n = r / S, j = r % S;
  int64_t bos, len, coff;
  seqInfo<C>(p, n, bos, len, coff);
  const int seqChunks = int((len + C - 1) / C);
  const int first = S > 1 ? int(j * p.seg_chunks) : 0;  // this run's chunks [first, last)
  const int last = S > 1 ? min(first + int(p.seg_chunks), seqChunks) : seqChunks;
  const int numChunks = last > first ? last - first : 0;

  const CUtensorMap* mapX = reverse ? &maps.q : &maps.k;
  const CUtensorMap* mapY = reverse ? &maps.d_o : &maps.v;
  T* out = static_cast<T*>(reverse ? p.dstates : p.states);  // [slots, H, dk, dv]

  const auto tX = smemTile(sm.x, typename Tiles::X{});
  const auto tXt = smemTile(sm.x, typename Tiles::Xt{});
  const auto tY = smemTile(sm.y, typename Tiles::Y{});
  Mma mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor fXt = thr.partition_fragment_A(tXt.tensor());  // (MMA, M, K, stage)
  Tensor fY = thr.partition_fragment_B(tY.tensor());
  Tensor acc = partition_fragment_C(mma, Shape<Int<DK>, Int<BV>>{});
  const auto cS = accCoords<DK, BV>(mma);

  const int64_t stateOffset = (int64_t(n) * H + h) * DK * DV + v0;  // [N, H, dk, dv]
  const int64_t runOffset = ((int64_t(reverse) * runs + r) * H + h) * DK * DV + v0;  // [2, R, H, dk, dv]
  const float* init = nullptr;  // this run's start state block (null: zeros)
  if (!kEndsOnly) {
    if (S > 1) init = p.seg_starts + runOffset;  // the scan's, h0 / d_ht included
    else if (const float* given = reverse ? p.d_ht : p.h0) init = given + stateOffset;
  }
  loadStateBlock<Mma>(acc, cS, init, DV);

  auto chunkOf = [&](int i) { return reverse ? last - 1 - i : first + i; };
  auto rowsOf = [&](int c) { return int(len - int64_t(c) * C < C ? len - int64_t(c) * C : C); };
  const auto origin = tokenMapOrigin<C>(p, n, bos);  // chunk c at (origin.chunk(c), origin.seq) of the maps
  // Thread 0 announces and issues each group's boxes; the others only arrive.
  auto loadTiles = [&](int c, int stage) {
    uint64_t* bar = &sm.tilesLoaded[stage];
    if (tid == 0)
      bulkLoadKeyValueChunk<C, DK, BV>(tX, tY, stage, mapX, mapY, v0, h, origin.chunk(c), origin.seq, bar);
    copyArrive(bar);
  };
  auto loadDecays = [&](int c) {
    if (tid == 0) {
      barrierExpectBytes(&sm.decaysLoaded, C * DK * sizeof(float));
      bulkLoad4d(sharedAddress(sm.g), &maps.g, 0, h, origin.chunk(c), origin.seq, &sm.decaysLoaded);
    }
    copyArrive(&sm.decaysLoaded);
  };
  const bool packed = p.cu_seqlens != nullptr;
  if (tid == 0) {
    barrierInit(&sm.tilesLoaded[0], kWarpgroupThreads);
    barrierInit(&sm.tilesLoaded[1], kWarpgroupThreads);
    barrierInit(&sm.decaysLoaded, kWarpgroupThreads);
  }
  __syncthreads();  // the mbarriers exist before any thread arrives
  if (numChunks > 0) {
    loadTiles(chunkOf(0), 0);
    loadDecays(chunkOf(0));
  }

  // This thread's channels (tid + j * 128, j < kChannels) and token range [t0, t0 + kSpan).
  const int part = kChannels > 1 ? 0 : tid / DK, t0 = part * kSpan;
  const float scale = p.scale;
  float runDecay[kChannels] = {};  // kEndsOnly, forward: the run's log-decay of this thread's channels
  for (int i = 0; i < numChunks; ++i) {
    const int stage = i & 1, c = chunkOf(i), rows = rowsOf(c);
    barrierWait(&sm.tilesLoaded[stage], uint32_t(i >> 1) & 1u);  // the stage's (i / 2)-th fill
    barrierWait(&sm.decaysLoaded, uint32_t(i) & 1u);
    if (packed && rows < C) {  // the boxes ran into the next sequence: zeros past the end
      zeroRows<false, C, DK, kWarpgroupThreads>(tX, stage, rows);
      zeroRows<true, C, BV, kWarpgroupThreads>(tY, stage, rows);
      for (int e = rows * DK / 4 + tid; e < C * DK / 4; e += kWarpgroupThreads)
        reinterpret_cast<float4*>(sm.g)[e] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    fenceToAsyncProxy();
    __syncthreads();  // this chunk's tiles landed; the previous product is done with the other stage
    if (i + 1 < numChunks) loadTiles(chunkOf(i + 1), stage ^ 1);

    // The state here is S_c (forward) or dS_{c+1} (reverse).
    if constexpr (!kEndsOnly) {
      T* slot = out + ((coff + c) * H + h) * int64_t(DK) * DV + v0;
      forEachPair<Mma>(cS, [&](int e, int d, int v) {
        *reinterpret_cast<uint32_t*>(slot + int64_t(d) * DV + v) = pack2<T>(acc(e), acc(e + 1));
      });
    }

    CUTE_UNROLL
    for (int cj = 0; cj < kChannels; ++cj) {
      const int ch = kChannels > 1 ? tid + cj * kWarpgroupThreads : tid % DK;
      const float* g = sm.g + t0 * DK + ch;  // this channel's g_{t0 + j} at g[j * DK]
      float before = 0.f, after = 0.f;  // the other ranges' sums before / after this one
      if constexpr (kParts > 1) {
        float total = 0.f;
        for (int j = 0; j < kSpan; ++j) total += g[j * DK];
        sm.part[part][ch] = total;
        __syncthreads();
        CUTE_UNROLL
        for (int q = 0; q < kParts; ++q) {
          if (q < part) before += sm.part[q][ch];
          if (q > part) after += sm.part[q][ch];
        }
      }
      // X[t][ch] *= e^{B - b_t} (forward: a suffix sum, walked down) or scale e^{bq_t} (reverse: a
      // prefix sum, walked up), kBatch tokens at a time: their loads issued together before any of
      // their stores (the shared-memory accesses are ordered asm, so a load after the previous
      // token's store would wait a round trip each)
      constexpr int kBatch = 8;
      static_assert(kSpan % kBatch == 0, "whole batches of tokens");
      uint16_t xs[kBatch];
      float gs[kBatch];
      if (!reverse) {
        float run = after;  // sum_{u > t} g_u
#pragma unroll 1
        for (int j0 = kSpan - kBatch; j0 >= 0; j0 -= kBatch) {
          CUTE_UNROLL
          for (int j = 0; j < kBatch; ++j) {
            xs[j] = lds16(tX.at(t0 + j0 + j, ch, stage));
            gs[j] = g[(j0 + j) * DK];
          }
          CUTE_UNROLL
          for (int j = kBatch - 1; j >= 0; --j) {
            sts16(tX.at(t0 + j0 + j, ch, stage), pack1<T>(unpack1<T>(xs[j]) * expFtz(run)));
            run += gs[j];
          }
        }
        if (part == 0) sm.eB[ch] = expFtz(run);
        runDecay[cj] += run;  // the chunk's total where part == 0
      } else {
        float run = before;  // b_t
#pragma unroll 1
        for (int j0 = 0; j0 < kSpan; j0 += kBatch) {
          CUTE_UNROLL
          for (int j = 0; j < kBatch; ++j) {
            xs[j] = lds16(tX.at(t0 + j0 + j, ch, stage));
            gs[j] = g[(j0 + j) * DK];
          }
          CUTE_UNROLL
          for (int j = 0; j < kBatch; ++j) {
            const float bq = excl ? run : run + gs[j];
            run += gs[j];
            sts16(tX.at(t0 + j0 + j, ch, stage), pack1<T>(unpack1<T>(xs[j]) * (scale * expFtz(bq))));
          }
        }
        if (part == kParts - 1) sm.eB[ch] = expFtz(run);
      }
    }
    fenceToAsyncProxy();  // the scaled X for the tensor cores; g's reads before its refill
    __syncthreads();  // the scaled X and e^B for every channel; g is read
    if (i + 1 < numChunks) loadDecays(chunkOf(i + 1));
    forEachPair<Mma>(cS, [&](int e, int d, int v) {
      const float f = sm.eB[d];
      acc(e) *= f;
      acc(e + 1) *= f;
    });
    issue(acc);
    gemm<false>(mma, fXt(_, _, _, stage), fY(_, _, _, stage), acc);
    commitAndWait(acc);
  }

  if constexpr (kEndsOnly) {
    storeStateBlock<Mma>(acc, cS, p.seg_ends + runOffset, DV);
    if (!reverse && blockIdx.x == 0 && part == 0)
      for (int cj = 0; cj < kChannels; ++cj) {
        const int ch = kChannels > 1 ? tid + cj * kWarpgroupThreads : tid % DK;
        p.seg_decay[(int64_t(r) * H + h) * DK + ch] = runDecay[cj];
      }
  } else if (reverse && p.dh0 && j == 0) {
    storeStateBlock<Mma>(acc, cS, p.dh0 + stateOffset, DV);
  }
}

/// The scan over segments, elementwise (four elements a thread; grid: the [dk, dv] state's blocks of
/// kSegmentStartThreads * 4 elements, heads, sequences; static: each dtype's translation unit
/// keeps its own), from the ends pass's E_j and G_j:
///   forward:  start_0 = h0,   start_{j+1} = e^{G_j} . start_j + E_j
///   reverse:  start_{S-1} = d_ht,   start_{j-1} = e^{G_j} . start_j + E'_j
/// (the reverse run's start is its last chunk's end: dS after the segment), e^{G_j} per key row d.
static __global__ void __launch_bounds__(kSegmentStartThreads)
    diagSegmentStartKernel(const DiagGradParams p, float* starts) {
  constexpr int kPerThread = 4;
  const int H = p.heads, h = blockIdx.y, n = blockIdx.z, S = p.segments, DV = p.value_dim;
  const int64_t size = int64_t(p.key_dim) * DV, runs = int64_t(p.num_seqs) * S;
  const int64_t e0 = (int64_t(blockIdx.x) * kSegmentStartThreads + threadIdx.x) * kPerThread;
  if (e0 >= size) return;
  const int d = int(e0 / DV);  // one key row (DV is a multiple of four)
  const int64_t own = (int64_t(n) * H + h) * size + e0;  // [N, H, dk, dv]
  for (int dir = 0; dir < 2; ++dir) {
    const float* init = dir ? p.d_ht : p.h0;
    float run[kPerThread];
    for (int i = 0; i < kPerThread; ++i) run[i] = init ? init[own + i] : 0.f;
    for (int step = 0; step < S; ++step) {
      const int64_t r = int64_t(n) * S + (dir ? S - 1 - step : step);
      const int64_t at = ((dir * runs + r) * H + h) * size + e0;
      for (int i = 0; i < kPerThread; ++i) starts[at + i] = run[i];
      const float decay = __expf(p.seg_decay[(r * H + h) * p.key_dim + d]);
      for (int i = 0; i < kPerThread; ++i) run[i] = decay * run[i] + p.seg_ends[at + i];
    }
  }
}

/// Both directions' passes over every (value block, head, run): a run is a sequence, or with
/// p.segments > 1 one of its segments.
template <class T, int DK, int BV, bool kEndsOnly = false>
void launchDiagStateScan(const DiagGradParams& p, cudaStream_t stream) {
  LINAC_REQUIRE(p.value_dim % BV == 0, "hopper diagStateScan: value_dim in whole value blocks");
  auto kernel = diagStateScanKernel<T, DK, BV, kEndsOnly>;
  constexpr size_t bytes = DiagStateScanTiles<T, DK, BV>::kSmemBytes;
  typename DiagStateScanTiles<T, DK, BV>::Maps maps{};
  const TokenExtent layout = tokenExtent(p);
  auto rows = [&](CUtensorMap* map, const void* base, int64_t width, auto encode) {
    return encode(map, base, width, p.heads, layout, kChunk);
  };
  const bool ok = rows(&maps.k, p.k, DK, encodeTokenMap<T, DK>) && rows(&maps.q, p.q, DK, encodeTokenMap<T, DK>) &&
                  rows(&maps.v, p.v, p.value_dim, encodeTokenMap<T, BV>) &&
                  rows(&maps.d_o, p.d_o, p.value_dim, encodeTokenMap<T, BV>) &&
                  encodeFloatTokenMap(&maps.g, p.g, DK, p.heads, layout, DK, kChunk);
  LINAC_REQUIRE(ok, "hopper diagStateScan: no tensor map for its operands (a driver without "
                    "cuTensorMapEncodeTiled, a tensor not 16-byte aligned, or more than 2^31 rows)");
  LINAC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  const int runs = p.num_seqs * (p.segments > 1 ? p.segments : 1);
  kernel<<<dim3(p.value_dim / BV, p.heads, 2 * runs), kWarpgroupThreads, bytes, stream>>>(p, maps);
  LINAC_CUDA_CHECK_LAUNCH("hopper::diagStateScanKernel");
}

/// The state passes in segments of every sequence (a padded batch), value blocks of BV: the runs'
/// end states from zero and their log-decays (the ends pass), the scan over segments
/// (diagSegmentStartKernel) for every run's true start state, then the passes again from those,
/// writing the states. Each pass's chain is a segment long; their sums are those of the whole
/// pass in another order (start states in fp32, the workspaces rounded once, as there).
template <class T, int DK, int BV>
void runDiagStateScanSegments(DiagGradParams p, int segments, cudaStream_t stream) {
  LINAC_REQUIRE(p.cu_seqlens == nullptr && p.chunks_per_seq > 1, "hopper diagStateScan: segments of a padded batch");
  p.seg_chunks = (p.chunks_per_seq + segments - 1) / segments;
  p.segments = int((p.chunks_per_seq + p.seg_chunks - 1) / p.seg_chunks);  // none empty
  const int64_t size = int64_t(DK) * p.value_dim, runs = int64_t(p.num_seqs) * p.segments;
  const size_t stateBytes = size_t(2 * runs) * p.heads * size * sizeof(float);  // [2, R, H, dk, dv]
  const size_t decayBytes = size_t(runs) * p.heads * DK * sizeof(float);        // [R, H, dk]
  const Workspace workspace(2 * stateBytes + decayBytes, stream);
  float* starts = reinterpret_cast<float*>(workspace.data());
  p.seg_ends = starts + stateBytes / sizeof(float);
  p.seg_decay = p.seg_ends + stateBytes / sizeof(float);
  launchDiagStateScan<T, DK, BV, true>(p, stream);
  const unsigned blocks = unsigned((size + 4 * kSegmentStartThreads - 1) / (4 * kSegmentStartThreads));
  diagSegmentStartKernel<<<dim3(blocks, p.heads, p.num_seqs), kSegmentStartThreads, 0, stream>>>(p, starts);
  LINAC_CUDA_CHECK_LAUNCH("hopper::diagSegmentStartKernel");
  p.seg_starts = starts;
  launchDiagStateScan<T, DK, BV>(p, stream);
}

/// Both state passes of every (value block, head, sequence) (diag_grad_<dtype>.cu instantiate it):
/// value blocks of 64 columns, or of 32 where blocks of 64 would leave multiprocessors without a
/// CTA (long sequences with few heads: B2 H4 dv 128 makes 32 CTAs of 64 columns, 64 of 32). At dk
/// 256 too (the [256, 64] accumulator is 128 registers a thread): every value block's CTA loads
/// and scales the same keys and log-decays, so the wider block halves that work per column.
/// DV is the gradient stage's value tile; p.value_dim, a multiple of it, sizes the grid.
///
/// Where even blocks of 32 leave SMs idle and the batch is padded, in segments (unless
/// LINAC_HOPPER_SEGMENTS=0): as many as put on every SM as many CTAs of kWide columns as its shared
/// memory holds, in one wave (LINAC_HOPPER_SEGMENT_COUNT=N pins the count).
template <class T, int DK, int DV>
void runDiagStateScan(const DiagGradParams& p, cudaStream_t stream) {
  constexpr int kWide = DV < kDiagScanValueBlock ? DV : kDiagScanValueBlock, kNarrow = kWide / 2;
  const int smCount = multiprocessorCount();
  const int64_t wideCtas = int64_t(p.value_dim / kWide) * p.heads * 2 * p.num_seqs;
  if (wideCtas >= smCount) {
    launchDiagStateScan<T, DK, kWide>(p, stream);
    return;
  }
  const bool segmented = p.cu_seqlens == nullptr && p.chunks_per_seq > 1 && 2 * wideCtas < smCount &&
                         envSwitch("LINAC_HOPPER_SEGMENTS", true);
  if (!segmented) {
    launchDiagStateScan<T, DK, kNarrow>(p, stream);
    return;
  }
  constexpr int perSm =
      int(kSharedBytesPerSm / (DiagStateScanTiles<T, DK, kWide>::kSmemBytes + kSharedBytesReservedPerCta));
  const int64_t wanted = segmentCountPinned(int64_t(perSm) * smCount / wideCtas);
  runDiagStateScanSegments<T, DK, kWide>(p, int(std::clamp<int64_t>(wanted, 2, p.chunks_per_seq)), stream);
}

}  // namespace linac::kernels::cuda::hopper

// Used inside namespace linac::kernels::cuda::hopper.
#define LINAC_HOPPER_DIAG_STATE_SCAN_INSTANTIATE(T)                          \
  template void runDiagStateScan<T, 64, 64>(const DiagGradParams&, cudaStream_t);  \
  template void runDiagStateScan<T, 64, 128>(const DiagGradParams&, cudaStream_t); \
  template void runDiagStateScan<T, 128, 64>(const DiagGradParams&, cudaStream_t); \
  template void runDiagStateScan<T, 128, 128>(const DiagGradParams&, cudaStream_t); \
  template void runDiagStateScan<T, 256, 128>(const DiagGradParams&, cudaStream_t);
