// The Hopper forward's entry points: which calls it takes, and the dispatch over element type, key
// dim and decay class to the instantiations in forward_<dtype>_k<dk>.cu. Key dim 256 and value
// dims above 256 (Gated DeltaNet at the 340m and 1.3b presets: dk 256, dv 512) are taken unless
// LINAC_HOPPER_WIDE=0 (2.1x faster than the mma.sync kernel at those heads on the H200 when their
// state stage still spilled 68-136 bytes at dk 256: kernels/cuda/NOTES.md).
#include "hopper_forward.h"

#include "../autotune.h"
#include "../cuda_check.h"
#include "../device_info.h"
#include "chunk_decay.cuh"
#include "env_switch.h"
#include "forward_params.h"

#include <cutlass/bfloat16.h>
#include <cutlass/half.h>

#include <string>
#include <vector>

namespace linac::kernels::cuda::hopper {

template <class T, int DK, class Decay>
void runStages(bool delta, ForwardParams p, cudaStream_t stream);
template <class T, int DK, bool kExclusive>
void runDiagonalStages(ForwardParams p, cudaStream_t stream);
template <class T, int DK, class Decay>
void runSplitStages(ForwardParams p, cudaStream_t stream);
template <class T, int DK, class Decay>
void runSegmentedStages(ForwardParams p, cudaStream_t stream);
template <class T, int DK, class Decay>
void runSegmentedFusedStages(ForwardParams p, cudaStream_t stream);
template <class T, int DK>
bool hasHopperCode();

namespace {

bool isHopper() {
  static const bool hopper = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
      return false;
    return major == 9 && minor == 0 && hasHopperCode<cutlass::bfloat16_t, 128>();
  }();
  return hopper;
}

/// Every decay class at one key dim (64, 128 or 256).
template <class T, int DK>
void runDecay(const RecurrenceKind& kind, const ForwardParams& p, cudaStream_t stream) {
  const bool delta = kind.update == UpdateRule::Delta;
  switch (kind.decay) {
    case DecayClass::None: runStages<T, DK, NoDecay>(delta, p, stream); break;
    case DecayClass::Fixed: runStages<T, DK, FixedDecay>(delta, p, stream); break;
    case DecayClass::Scalar: runStages<T, DK, ScalarDecay>(delta, p, stream); break;
    case DecayClass::Diagonal:
      LINAC_REQUIRE(!delta, "hopper forward: the delta rule with a diagonal decay");
      if (kind.readout == Readout::ExclusiveBonus)
        runDiagonalStages<T, DK, true>(p, stream);
      else
        runDiagonalStages<T, DK, false>(p, stream);
      break;
  }
}

template <class T>
void runKeyDim(const RecurrenceKind& kind, const ForwardParams& p, int64_t key_dim,
               cudaStream_t stream) {
  if (key_dim == 64) runDecay<T, 64>(kind, p, stream);
  else if (key_dim == 128) runDecay<T, 128>(kind, p, stream);
  else runDecay<T, 256>(kind, p, stream);
}

/// The additive rule's split form (forward_split_<dtype>.cu) for decay none / fixed / scalar, in
/// segments of each sequence where `segmented`; `fused` (segmented only): the fused stage over the
/// segments instead.
template <class T>
void runSplitKeyDim(DecayClass decay, const ForwardParams& p, int64_t key_dim, bool segmented, bool fused,
                    cudaStream_t stream) {
  auto dims = [&]<class Decay>() {
    auto at = [&]<int DK>() {
      if (fused) runSegmentedFusedStages<T, DK, Decay>(p, stream);
      else if (segmented) runSegmentedStages<T, DK, Decay>(p, stream);
      else runSplitStages<T, DK, Decay>(p, stream);
    };
    if (key_dim == 64) at.template operator()<64>();
    else if (key_dim == 128) at.template operator()<128>();
    else at.template operator()<256>();
  };
  switch (decay) {
    case DecayClass::None: dims.template operator()<NoDecay>(); break;
    case DecayClass::Fixed: dims.template operator()<FixedDecay>(); break;
    case DecayClass::Scalar: dims.template operator()<ScalarDecay>(); break;
    case DecayClass::Diagonal: LINAC_REQUIRE(false, "hopper forward: no split form for a diagonal decay");
  }
}

/// Whether the additive rule's forward runs in segments (forward_split.cuh chooses how many): a
/// padded batch of at least two chunks a sequence whose fused state stage, in value blocks of
/// kNarrowValueBlock, makes fewer CTAs than SMs.
bool segmentsApply(const RecurrenceShape& s, int64_t num_seqs, int64_t chunks) {
  const int64_t ctas = int64_t(s.value_dim / kNarrowValueBlock) * s.heads * num_seqs;
  return s.cu_seqlens == nullptr && chunks > 1 && ctas < multiprocessorCount();
}

/// The diagonal decay's stages, on unless LINAC_HOPPER_DIAG=0 (for A/B runs).
bool diagonalEnabled() { return envSwitch("LINAC_HOPPER_DIAG", true); }

/// Key dim 256 and value dims above 256, on unless LINAC_HOPPER_WIDE=0 (for A/B runs).
bool wideEnabled() { return envSwitch("LINAC_HOPPER_WIDE", true); }

}  // namespace

bool diagonalWideKeysEnabled() { return envSwitch("LINAC_HOPPER_DIAG_K256", true); }

bool narrowStateEnabled() { return envSwitch("LINAC_HOPPER_NARROW_STATE", true); }

bool blockInverseEnabled() { return envSwitch("LINAC_HOPPER_BLOCK_INVERSE", true); }

bool forwardSupported(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& s) {
  if (dtype == DType::F32) return false;
  if (kind.decay == DecayClass::Diagonal) {
    if (kind.update != UpdateRule::Additive || !diagonalEnabled()) return false;
  } else if (kind.readout != Readout::Inclusive) {
    return false;
  }
  const bool wide = s.key_dim == 256 || s.value_dim > 256;
  if (wide && !wideEnabled()) return false;
  if (s.key_dim != 64 && s.key_dim != 128 && s.key_dim != 256) return false;
  if (s.key_dim == 256 && kind.decay == DecayClass::Diagonal && !diagonalWideKeysEnabled()) return false;
  if (s.value_dim % kValueBlock != 0) return false;
  if (kind.update == UpdateRule::Delta && s.value_dim != 64 && s.value_dim != 128 &&
      s.value_dim != 256 && s.value_dim != 512)
    return false;
  return envSwitch("LINAC_HOPPER", true) && isHopper();
}

void forward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& s,
             const RecurrenceForwardArgs& a, int64_t num_seqs, cudaStream_t stream) {
  LINAC_REQUIRE(forwardSupported(kind, dtype, s), "hopper forward: unsupported call");
  ForwardParams p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.g = a.g;
  p.beta = a.beta;
  p.bonus = a.u;
  p.h0 = a.h0;
  p.o = a.o;
  p.ht = a.ht;
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.chunks_per_seq = (s.seq_len + kChunk - 1) / kChunk;
  p.num_seqs = int(num_seqs);
  p.heads = int(s.heads);
  p.value_dim = int(s.value_dim);
  p.scale = a.scale;
  p.block_inverse = blockInverseEnabled();
  p.thin_state = narrowStateEnabled();
  const int64_t tokens = s.batch * s.seq_len;
  const int64_t slots = s.cu_seqlens ? (tokens + kChunk - 1) / kChunk + num_seqs
                                     : s.batch * p.chunks_per_seq;
  p.tokens = tokens;
  p.slots = slots;
  auto run = [&](bool late, bool overlap, bool prepared = false) {
    ForwardParams q = p;
    q.late_loads = late;
    q.overlap = overlap;
    q.prepared_scores = prepared;
    if (dtype == DType::BF16)
      runKeyDim<cutlass::bfloat16_t>(kind, q, s.key_dim, stream);
    else
      runKeyDim<cutlass::half_t>(kind, q, s.key_dim, stream);
  };
  if (kind.update == UpdateRule::Additive && kind.decay != DecayClass::Diagonal) {
    // The split form (forward_split.cuh): a state pass carrying K^T V alone, then every chunk's
    // output in parallel. Opt-in (LINAC_HOPPER_SPLIT_STATE=1): on an H100 it was 0.347 ms against
    // the fused stage's 0.315 at B2 T16384 H4 D128 and slower at the other shapes (session 35),
    // the chain's per-chunk latency, not its products, being the time; its two stages are meant
    // for a segment-parallel form.
    // In segments, the default where the state stage's grid leaves SMs idle (segment_scan.cuh;
    // =0 turns them off): the same stages over segments of each sequence run from zero state,
    // their start states from a scan over segments, so the chain is a segment long. On an H100
    // (bench/NOTES.md, session 36) RetNet 0.257 against 0.316 ms, Mamba-2 0.242 against 0.348 at
    // B2 T16384 H4 D128.
    // LINAC_HOPPER_SEGMENTED_FUSED=1 (segment_correct.cuh; written in session 36, not yet run):
    // the fused stage itself over the segments, no S_c written, its outputs corrected by the
    // segments' start states.
    const bool segmented =
        envSwitch("LINAC_HOPPER_SEGMENTS", true) && segmentsApply(s, num_seqs, p.chunks_per_seq);
    const bool fused = segmented && envSwitch("LINAC_HOPPER_SEGMENTED_FUSED", false);
    if (segmented || envSwitch("LINAC_HOPPER_SPLIT_STATE", false)) {
      if (dtype == DType::BF16)
        runSplitKeyDim<cutlass::bfloat16_t>(kind.decay, p, s.key_dim, segmented, fused, stream);
      else
        runSplitKeyDim<cutlass::half_t>(kind.decay, p, s.key_dim, segmented, fused, stream);
      return;
    }
    // The chunk scores formed by a chunk-parallel stage first (scores_prepare.cuh), or on the
    // state stage's serial chain (=0). Prepared, the default, was faster at every shape timed on
    // an H100 (bench/NOTES.md, session 35: RetNet 0.208 / 0.226 ms at B8 T4096 H8 D128, 0.391 /
    // 0.737 at B2 T16384 H4, 0.569 / 0.894 at D256), the chain being the forward's time where the
    // state stage's grid leaves SMs idle. =auto times the two per shape class (autotune.h).
    const Switch prepared = envChoice("LINAC_HOPPER_PREPARED_SCORES", Switch::On);
    if (prepared != Switch::Auto) {
      run(false, false, prepared == Switch::On);
      return;
    }
    const int64_t narrowCtas = int64_t(s.value_dim / kNarrowValueBlock) * s.heads * num_seqs;
    const bool fallback = narrowCtas < multiprocessorCount();
    std::vector<TuneCandidate> candidates;  // the first is the fallback
    for (const bool on : {fallback, !fallback})
      candidates.push_back({on ? "prepared" : "inline", [&run, on] { run(false, false, on); }});
    const size_t pick = chooseCandidate("forward.additive_scores", recurrenceShapeClass(kind, dtype, s, num_seqs),
                                        candidates, 0, stream);
    candidates[pick].launch();
    return;
  }
  if (kind.update != UpdateRule::Delta || s.key_dim > 128) {  // no choice (dk 256 loads late always)
    run(false, false);
    return;
  }
  // The delta rule's state stage, timed per shape class (autotune.h): late loads (one stage of
  // q / w) helped Gated DeltaNet by 8-13% on the H200 and cost DeltaNet 2-12% (bench/NOTES.md),
  // so the fallback (LINAC_AUTOTUNE=0) is late for a scalar decay only; the overlapped order moved
  // the H100's times by -2% to +3% (session 25), so it is timed too, its fallback off.
  // LINAC_HOPPER_LATE / LINAC_HOPPER_OVERLAP =1 / =0 pin either.
  const bool lateFallback = kind.decay == DecayClass::Scalar;
  const Switch late = envChoice("LINAC_HOPPER_LATE", Switch::Auto);
  const Switch overlap = envChoice("LINAC_HOPPER_OVERLAP", Switch::Auto);
  auto values = [](Switch sw, bool fallback) {
    if (sw == Switch::Auto) return std::vector<bool>{fallback, !fallback};
    return std::vector<bool>{sw == Switch::On};
  };
  std::vector<TuneCandidate> candidates;  // the first is the fallback
  for (const bool o : values(overlap, false))
    for (const bool l : values(late, lateFallback))
      candidates.push_back({std::string(l ? "late" : "early") + (o ? "+overlap" : ""),
                            [&run, l, o] { run(l, o); }});
  const size_t pick = chooseCandidate("forward.delta_state", recurrenceShapeClass(kind, dtype, s, num_seqs),
                                      candidates, 0, stream);
  candidates[pick].launch();
}

}  // namespace linac::kernels::cuda::hopper
