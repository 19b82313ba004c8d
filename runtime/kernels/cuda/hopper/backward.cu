// The Hopper backward's entry points: which calls it takes, and the dispatch over element type,
// dk, dv and decay class to the instantiations in backward_<dtype>.cu (additive rule),
// backward_delta_<dtype>.cu (delta rule) and backward_delta_wide_<dtype>.cu (the delta rule at
// dk 256, dv 512 or 256: Gated DeltaNet's 340m / 1.3b heads and issue 11's D256 shape;
// LINAC_HOPPER_WIDE_BWD=0 sends them to the mma.sync kernels, LINAC_HOPPER_WIDE_BWD_V256=0 dv 256
// alone), backward_wide_<dtype>.cu (the additive rule at dk 256; LINAC_HOPPER_ADDITIVE_K256=0 sends
// it to the mma.sync kernels), and diag_grad_<dtype>.cu (the diagonal decay's state passes and gradient
// stage, called by chunk_backward_diagonal.cu; LINAC_HOPPER_DIAG_BWD=0 sends them back to the
// mma.sync passes, =single / =halves force Ks and Qs in one or two 16-bit halves).
#include "hopper_backward.h"

#include "../autotune.h"
#include "../cuda_check.h"
#include "../device_info.h"
#include "../workspace.h"
#include "backward_params.h"
#include "chunk_decay.cuh"
#include "delta_bwd_params.h"
#include "env_switch.h"
#include "hopper_forward.h"

#include <cutlass/bfloat16.h>
#include <cutlass/half.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace linac::kernels::cuda::hopper {

template <class T, int DK, int DV, class Decay>
void runBackwardStages(BackwardParams p, int64_t slots, cudaStream_t stream);
template <class T, int DK, class Decay>
void runWideBackwardStages(BackwardParams p, int64_t slots, cudaStream_t stream);
template <class T, int DK, int DV>
void runDiagStateScan(const DiagGradParams& p, cudaStream_t stream);
template <class T, int DK, int DV>
void runDiagGrad(const DiagGradParams& p, int64_t slots, cudaStream_t stream);
template <class T, int DK, int DV, class Decay>
void runDeltaBackwardStages(DeltaBackwardParams p, int64_t tokens, int64_t slots,
                            cudaStream_t stream);

namespace {

/// f.template operator()<Decay>() for the additive rule's decay classes here (none / fixed /
/// scalar; the diagonal decay has its own stages).
template <class F>
void withDecay(DecayClass decay, F&& f) {
  switch (decay) {
    case DecayClass::None: f.template operator()<NoDecay>(); break;
    case DecayClass::Fixed: f.template operator()<FixedDecay>(); break;
    case DecayClass::Scalar: f.template operator()<ScalarDecay>(); break;
    case DecayClass::Diagonal: LINAC_REQUIRE(false, "hopper backward: diagonal decay");
  }
}

template <class T>
void runDims(DecayClass decay, const RecurrenceShape& s, const BackwardParams& p, int64_t slots,
             cudaStream_t stream) {
  const bool k64 = s.key_dim == 64, v64 = s.value_dim == 64;
  withDecay(decay, [&]<class Decay>() {
    if (s.key_dim == 256) runWideBackwardStages<T, 256, Decay>(p, slots, stream);
    else if (k64 && v64) runBackwardStages<T, 64, 64, Decay>(p, slots, stream);
    else if (k64) runBackwardStages<T, 64, 128, Decay>(p, slots, stream);
    else if (v64) runBackwardStages<T, 128, 64, Decay>(p, slots, stream);
    else runBackwardStages<T, 128, 128, Decay>(p, slots, stream);
  });
}

template <class T, int DK, int DV>
void runDeltaDecay(DecayClass decay, const DeltaBackwardParams& p, int64_t tokens, int64_t slots,
                   cudaStream_t stream) {
  if (decay == DecayClass::Scalar) runDeltaBackwardStages<T, DK, DV, ScalarDecay>(p, tokens, slots, stream);
  else runDeltaBackwardStages<T, DK, DV, NoDecay>(p, tokens, slots, stream);
}

template <class T>
void runDeltaDims(DecayClass decay, const RecurrenceShape& s, const DeltaBackwardParams& p,
                  int64_t tokens, int64_t slots, cudaStream_t stream) {
  const bool k64 = s.key_dim == 64, v64 = s.value_dim == 64;
  if (s.key_dim == 256 && s.value_dim == 512) runDeltaDecay<T, 256, 512>(decay, p, tokens, slots, stream);
  else if (s.key_dim == 256) runDeltaDecay<T, 256, 256>(decay, p, tokens, slots, stream);
  else if (k64 && v64) runDeltaDecay<T, 64, 64>(decay, p, tokens, slots, stream);
  else if (k64) runDeltaDecay<T, 64, 128>(decay, p, tokens, slots, stream);
  else if (v64) runDeltaDecay<T, 128, 64>(decay, p, tokens, slots, stream);
  else runDeltaDecay<T, 128, 128>(decay, p, tokens, slots, stream);
}

/// Whether the delta rule's state passes take value blocks of 16 columns: where blocks of 32 make
/// fewer CTAs than the device has SMs (long sequences with few heads), with narrowStateEnabled()
/// (the state passes' time is their serial chain of chunks, so twice the CTAs should come near
/// half the time there).
bool narrowDeltaStateEnabled(const RecurrenceShape& s, int64_t num_seqs) {
  if (!narrowStateEnabled()) return false;
  return (s.value_dim / kDeltaStateValueBlock) * s.heads * num_seqs < multiprocessorCount();
}

/// The delta rule (decay none / scalar): every gradient of recurrence.h from the five stages of
/// delta_backward_stages.cuh.
void deltaBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& s,
                   const RecurrenceBackwardArgs& a, int64_t num_seqs, int64_t slots,
                   cudaStream_t stream) {
  const RecurrenceForwardArgs& f = a.fwd;
  DeltaBackwardParams p{};
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.d_o = a.d_o;
  p.g = kind.decay == DecayClass::Scalar ? f.g : nullptr;
  p.beta = f.beta;
  p.h0 = f.h0;
  p.d_ht = a.d_ht;
  p.dq = a.d_q;
  p.dk = a.d_k;
  p.dv = a.d_v;
  p.dg = kind.decay == DecayClass::Scalar ? a.d_g : nullptr;
  p.dbeta = a.d_beta;
  p.dh0 = a.d_h0;
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.chunks_per_seq = (s.seq_len + kChunk - 1) / kChunk;
  p.num_seqs = int(num_seqs);
  p.heads = int(s.heads);
  p.value_dim = int(s.value_dim);
  p.scale = f.scale;
  p.block_inverse = blockInverseEnabled();
  p.narrow_state = narrowDeltaStateEnabled(s, num_seqs);
  const int64_t tokens = s.batch * s.seq_len;
  auto run = [&](bool fusedReverse) {
    DeltaBackwardParams q = p;
    q.fused_reverse = fusedReverse;
    if (dtype == DType::BF16) runDeltaDims<cutlass::bfloat16_t>(kind.decay, s, q, tokens, slots, stream);
    else runDeltaDims<cutlass::half_t>(kind.decay, s, q, tokens, slots, stream);
  };
  // Stages 3 and 4 as one pass (delta_bwd_reverse_grad.cuh) at dk, dv <= 128, timed against the
  // staged pair per shape class (autotune.h): on an H100 at B8 T4096 H8 D128 the lab had it 4%
  // faster for DeltaNet (partly its smaller workspace, which the lab then mapped afresh each call)
  // and 9% slower for Gated DeltaNet (session 25); with one CTA per (head, sequence) against
  // dv / 32 of them, which wins also depends on how many sequences x heads fill the GPU.
  // The fallback (LINAC_AUTOTUNE=0) is staged; LINAC_HOPPER_FUSED_REVERSE=1 / 0 pins either.
  const Switch fused = s.key_dim <= 128 && s.value_dim <= 128
                           ? envChoice("LINAC_HOPPER_FUSED_REVERSE", Switch::Auto)
                           : Switch::Off;
  if (fused != Switch::Auto) {
    run(fused == Switch::On);
    return;
  }
  const std::vector<TuneCandidate> candidates{{"staged", [&] { run(false); }},
                                              {"fused", [&] { run(true); }}};
  const size_t pick = chooseCandidate("delta_backward.reverse",
                                      recurrenceShapeClass(kind, dtype, s, num_seqs), candidates, 0, stream);
  candidates[pick].launch();
}

/// f.template operator()<T, DK, DV>() for the diagonal stages' element type and dims (dk in {64,
/// 128, 256}; DV the value tile: 64, or 128 for dv 128 and the value tiles above it, as
/// diagonalGradSupported admits).
template <class F>
void withDiagTypes(DType dtype, const RecurrenceShape& s, F&& f) {
  auto dims = [&]<class T>() {
    const bool k64 = s.key_dim == 64, v64 = s.value_dim == 64;
    if (s.key_dim == 256) f.template operator()<T, 256, 128>();
    else if (k64 && v64) f.template operator()<T, 64, 64>();
    else if (k64) f.template operator()<T, 64, 128>();
    else if (v64) f.template operator()<T, 128, 64>();
    else f.template operator()<T, 128, 128>();
  };
  if (dtype == DType::BF16) dims.template operator()<cutlass::bfloat16_t>();
  else dims.template operator()<cutlass::half_t>();
}

/// The delta rule's wide heads: dk 256 with dv 512 (Gated DeltaNet's 340m heads) or dv 256 (issue
/// 11's D256 shape: 4.3 ms against the mma.sync passes' 14.5 for DeltaNet on an H100, session 35),
/// on unless LINAC_HOPPER_WIDE_BWD=0 (both) or LINAC_HOPPER_WIDE_BWD_V256=0 (dv 256).
bool wideDeltaBackwardEnabled(const RecurrenceShape& s) {
  if (s.key_dim != 256 || !envSwitch("LINAC_HOPPER_WIDE_BWD", true)) return false;
  return s.value_dim == 512 || (s.value_dim == 256 && envSwitch("LINAC_HOPPER_WIDE_BWD_V256", true));
}

/// The additive rule at dk 256 (issue 11's D256 shape), dv a multiple of 64 up to 512: the key and
/// value stages (chunk_grad_keys.cuh), on unless LINAC_HOPPER_ADDITIVE_K256=0 (Mamba-2's backward
/// at D256 2.76 ms against the mma.sync passes' 6.49 on an H100, session 35).
bool wideAdditiveBackwardEnabled(const RecurrenceShape& s) {
  return s.key_dim == 256 && s.value_dim % kGradValueBlock == 0 && s.value_dim <= 512 &&
         envSwitch("LINAC_HOPPER_ADDITIVE_K256", true);
}

/// The diagonal decay's Hopper stages: the default for both readouts (GLA, HGRN-2, RWKV-6); off
/// with LINAC_HOPPER_DIAG_BWD=0 or LINAC_HOPPER_BWD=0 (as every Hopper backward).
bool diagonalGradEnabled() {
  return envSwitch("LINAC_HOPPER_BWD", true) && envSwitch("LINAC_HOPPER_DIAG_BWD", true);
}

/// Whether the gradient stage takes Ks and Qs as high and low 16-bit halves (diag_grad.cuh): where
/// the compiler marked the decay's gradient as needing precision (kind.preciseDecayGrad: a decay
/// with an exp factor, as RWKV-6's -exp(w), whose d_w = d_g . g weighs the strongly decaying
/// channels, where d_g is small, most). There one half missed the 5e-3 gate on d_w (`linac verify
/// specs/rwkv6.yaml --device cuda`: 1.1e-2 to 1.7e-2 on the H200) and two pass it (192 / 192 on an
/// H100, 2026-12-05; NOTES.md has the analysis); they cost GLA's backward about 0.45 ms at B8 T4096
/// H8 D128, whose logsigmoid gate has a bounded derivative and passes with one.
/// LINAC_HOPPER_DIAG_BWD=single / =halves force one or two for A / B runs.
bool diagonalLowHalves(const RecurrenceKind& kind) {
  const char* env = std::getenv("LINAC_HOPPER_DIAG_BWD");
  if (env != nullptr && std::string(env) == "single") return false;
  if (env != nullptr && std::string(env) == "halves") return true;
  return kind.preciseDecayGrad;
}

constexpr int kDiagValueTile = 128;  // the gradient stage's widest value tile

/// Value dims above the gradient stage's tile (GLA at its 340m heads: dk 128, dv 256) in tiles of
/// kDiagValueTile columns, the inclusive readout; LINAC_HOPPER_DIAG_WIDE=0 sends them to the
/// mma.sync passes (bench/NOTES.md).
bool diagonalValueTilesEnabled() { return envSwitch("LINAC_HOPPER_DIAG_WIDE", true); }

}  // namespace

bool diagonalGradSupported(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& s) {
  if (dtype == DType::F32 || !diagonalGradEnabled()) return false;
  const bool oneTile = s.value_dim == 64 || s.value_dim == kDiagValueTile;
  // dk 256 (value tiles of 128 only) unless LINAC_HOPPER_DIAG_K256=0, the forward's switch; there
  // the exclusive readout takes value tiles too (not at dk <= 128, where no lab case has run them)
  const bool wideKeys = s.key_dim == 256 && s.value_dim % kDiagValueTile == 0 && diagonalWideKeysEnabled();
  const bool valueTiles = s.value_dim > kDiagValueTile && s.value_dim % kDiagValueTile == 0 &&
                           (kind.readout == Readout::Inclusive || wideKeys) && diagonalValueTilesEnabled();
  if ((s.key_dim != 64 && s.key_dim != 128 && !wideKeys) || (!oneTile && !valueTiles)) return false;
  // the same device and build checks as the forward (an additive rule without decay takes the
  // Hopper forward at these dims wherever the device and the build allow it)
  const RecurrenceKind plain{DecayClass::None, UpdateRule::Additive, Readout::Inclusive};
  return forwardSupported(plain, dtype, s);
}

void diagonalStateScan(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& s, const DiagGradParams& p,
                       cudaStream_t stream) {
  LINAC_REQUIRE(diagonalGradSupported(kind, dtype, s), "hopper diagonalStateScan: unsupported call");
  if (p.num_seqs <= 0) return;
  withDiagTypes(dtype, s, [&]<class T, int DK, int DV>() { runDiagStateScan<T, DK, DV>(p, stream); });
}

void diagonalGrad(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& s, const DiagGradParams& p,
                  int64_t slots, cudaStream_t stream) {
  LINAC_REQUIRE(diagonalGradSupported(kind, dtype, s), "hopper diagonalGrad: unsupported call");
  if (slots <= 0) return;
  DiagGradParams q = p;
  q.low_halves = diagonalLowHalves(kind) ? 1 : 0;
  const int64_t plane = s.batch * s.seq_len * s.heads * s.key_dim;  // [B, T, H, dk] (B = 1 varlen)
  // dv's operands, from the key stage to the value stage (diag_key_grad.cuh): each key block's
  // share of A^T and K e^{B - b}
  const int64_t atPlane = slots * s.heads * kChunk * kChunk;  // [slots, H, C, C] per key block
  const size_t atBytes = p.dv ? size_t(s.key_dim / kDiagKeyBlock) * atPlane * sizeof(float) : 0;
  const size_t kexpBytes = p.dv ? size_t(plane) * 2 : 0;  // [B, T, H, dk], 16-bit
  const Workspace values(atBytes + kexpBytes, stream);
  if (p.dv) {
    q.at_part = reinterpret_cast<float*>(values.data());
    q.at_plane = atPlane;
    q.kexp = values.data() + atBytes;
  }
  withDiagTypes(dtype, s, [&]<class T, int DK, int DV>() { runDiagGrad<T, DK, DV>(q, slots, stream); });
}

bool backwardSupported(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& s,
                       const RecurrenceBackwardArgs& a) {
  if (!envSwitch("LINAC_HOPPER_BWD", true)) return false;
  if (dtype == DType::F32 || kind.readout != Readout::Inclusive ||
      kind.decay == DecayClass::Diagonal)
    return false;
  if (kind.update == UpdateRule::Delta) {
    // DeltaNet / Gated DeltaNet (decay none / scalar). The delta rule always has beta, so
    // d_beta is part of the call.
    if (kind.decay == DecayClass::Fixed || a.fwd.beta == nullptr ||
        a.d_beta == nullptr)
      return false;
  } else if (kind.update != UpdateRule::Additive) {
    return false;
  }
  if (kind.decay == DecayClass::Fixed && a.d_g != nullptr) return false;  // a per-head total
  const bool narrow = (s.key_dim == 64 || s.key_dim == 128) && (s.value_dim == 64 || s.value_dim == 128);
  const bool wideDelta = kind.update == UpdateRule::Delta && wideDeltaBackwardEnabled(s);
  const bool wideAdditive = kind.update == UpdateRule::Additive && wideAdditiveBackwardEnabled(s);
  if (!narrow && !wideDelta && !wideAdditive) return false;
  if (!tensorMapAligned({a.fwd.q, a.fwd.k, a.fwd.v, a.d_o})) return false;
  RecurrenceKind forwardKind = kind;  // the same device and build checks as the forward
  return forwardSupported(forwardKind, dtype, s);
}

void backward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& s,
              const RecurrenceBackwardArgs& a, int64_t num_seqs, cudaStream_t stream) {
  LINAC_REQUIRE(backwardSupported(kind, dtype, s, a), "hopper backward: unsupported call");
  const int64_t tokens = s.batch * s.seq_len;
  const int64_t slots = s.cu_seqlens ? (tokens + kChunk - 1) / kChunk + num_seqs
                                     : s.batch * ((s.seq_len + kChunk - 1) / kChunk);
  if (kind.update == UpdateRule::Delta) {
    deltaBackward(kind, dtype, s, a, num_seqs, slots, stream);
    return;
  }
  const RecurrenceForwardArgs& f = a.fwd;
  BackwardParams p{};
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.d_o = a.d_o;
  p.g = f.g;
  p.h0 = f.h0;
  p.d_ht = a.d_ht;
  p.dq = a.d_q;
  p.dk = a.d_k;
  p.dv = a.d_v;
  p.dg = kind.decay == DecayClass::Scalar ? a.d_g : nullptr;
  p.dh0 = a.d_h0;
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.chunks_per_seq = (s.seq_len + kChunk - 1) / kChunk;
  p.num_seqs = int(num_seqs);
  p.heads = int(s.heads);
  p.key_dim = int(s.key_dim);
  p.value_dim = int(s.value_dim);
  p.scale = f.scale;
  // both state passes in one launch, twice the CTAs at once (RetNet's backward at B2 T16384 H4
  // D128: 0.448 ms against 0.740 in two launches on an H100, session 35); =0 launches them apart
  p.joint_state_passes = envSwitch("LINAC_HOPPER_JOINT_STATE", true);
  if (dtype == DType::BF16) runDims<cutlass::bfloat16_t>(kind.decay, s, p, slots, stream);
  else runDims<cutlass::half_t>(kind.decay, s, p, slots, stream);
}

}  // namespace linac::kernels::cuda::hopper
