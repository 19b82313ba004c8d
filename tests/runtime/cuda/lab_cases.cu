// The kernel lab's case lists (linac_cuda_lab, lab.cu): --quick's short list (the sanitizers'
// run) and the full list (every kind x dtype, edge shapes, the Hopper stages' switches), each case
// a call of lab_forward.cu's or lab_backward.cu's checks in a fixed order, so that --seed replays
// the same draws.
#include "lab_common.h"

#include <initializer_list>

namespace lab {

void runQuickCases(bool do_bwd) {
  Case c{{DecayClass::Diagonal, UpdateRule::Delta, Readout::ExclusiveBonus}, DType::BF16, 1, 70, 1, 64, 64, {0, 30, 70}};
  runChunkCase(c);
  // the Hopper forward stages (on sm_90): delta rule with a scalar decay, varlen, and a fixed
  // decay with several value blocks
  runChunkCase({{DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, DType::BF16, 1, 150, 2, 128, 64, {0, 70, 150}});
  runChunkCase({{DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 2, 100, 1, 64, 128, {}});
  // ... the additive rule's scores formed in the state stage (the other cases take them from
  // their preparation, scores_prepare.cuh), varlen with a partial chunk; the diagonal decay at
  // dk 256 (its Hopper stages)
  withEnv("LINAC_HOPPER_PREPARED_SCORES", "0", [] {
    runChunkCase({{DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 1, 150, 2, 128, 64,
                  {0, 70, 150}});
    return 0.0;
  });
  runChunkCase({{DecayClass::Diagonal, UpdateRule::Additive, Readout::ExclusiveBonus}, DType::BF16, 1, 150, 1, 256, 64,
                {0, 70, 150}});
  // the additive rule's split forward (forward_split.cuh; LINAC_HOPPER_SPLIT_STATE=1 until it
  // has run): varlen with a partial chunk, and a fixed decay at dk 256 with h0 / ht
  withEnv("LINAC_HOPPER_SPLIT_STATE", "1", [] {
    runChunkCase({{DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 1, 150, 2, 128, 64,
                  {0, 70, 150}});
    runChunkCase({{DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 2, 100, 1, 256, 128, {}});
    return 0.0;
  });
  // ... and in segments (segment_scan.cuh; pinned, as its default applies by grid size):
  // three segments of one chunk each, the last partial; two at dk 256 with a fixed decay
  withEnv("LINAC_HOPPER_SEGMENTS", "1", [] {
    runChunkCase({{DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 2, 150, 2, 128, 64, {}});
    runChunkCase({{DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 2, 100, 1, 256, 128, {}});
    // two segments, the first of two chunks (its second chunk's decay from the segment's start),
    // split and fused (LINAC_HOPPER_SEGMENTED_FUSED=1)
    return withEnv("LINAC_HOPPER_SEGMENT_COUNT", "2", [] {
      runChunkCase({{DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 2, 150, 2, 128, 64, {}});
      return withEnv("LINAC_HOPPER_SEGMENTED_FUSED", "1", [] {
        runChunkCase({{DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 2, 150, 2, 128, 64,
                      {}});
        return 0.0;
      });
    });
  });
  // ... and the fused state-and-output stage over whole sequences (the segments' default
  // takes the padded cases at these grid sizes)
  withEnv("LINAC_HOPPER_SEGMENTS", "0", [] {
    runChunkCase({{DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 2, 100, 1, 64, 128, {}});
    return 0.0;
  });
  c.kind = {DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive};
  c.dtype = DType::F32;
  runChunkCase(c);
  runStepCase({DecayClass::Diagonal, UpdateRule::Delta, Readout::ExclusiveBonus}, DType::BF16, 2, 2, 64, 64);
  runScanCase(DType::BF16, 1, 50, 64, {0, 20, 50});
  if (do_bwd) {
    Case b{{DecayClass::Diagonal, UpdateRule::Delta, Readout::ExclusiveBonus}, DType::BF16, 1, 70, 1, 64, 32, {0, 30, 70}};
    runBwdCase(b);
    b.kind = {DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive};
    b.dtype = DType::F32; b.cu = {}; b.B = 2; b.T = 40; b.dk = 128;
    runBwdCase(b);
    // tensor-core additive path (chunk_backward_additive.cu): varlen + partial chunk, dk != dv
    Case a{{DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 1, 70, 1, 64, 128, {0, 30, 70}};
    runBwdCase(a);
    a.kind.decay = DecayClass::Fixed; a.dtype = DType::F32; a.cu = {}; a.B = 2; a.T = 80; a.dk = 128; a.dv = 64;
    runBwdCase(a);
    // tensor-core diagonal path (chunk_backward_diagonal.cu): inclusive varlen, exclusive + bonus
    Case d{{DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 1, 70, 1, 64, 128, {0, 30, 70}};
    runBwdCase(d);
    d.kind.readout = Readout::ExclusiveBonus; d.dtype = DType::F32; d.cu = {}; d.B = 2; d.T = 80; d.dk = 128; d.dv = 64;
    runBwdCase(d);
    // ... and its Hopper gradient stage: exclusive + bonus, varlen with
    // partial chunks, dk 128 > dv
    runBwdCase({{DecayClass::Diagonal, UpdateRule::Additive, Readout::ExclusiveBonus}, DType::BF16, 1, 150, 1, 128, 64,
                {0, 20, 150}});
    // ... its state passes in segments (a padded batch at this grid size), two a sequence
    withEnv("LINAC_HOPPER_SEGMENT_COUNT", "2", [] {
      runBwdCase({{DecayClass::Diagonal, UpdateRule::Additive, Readout::ExclusiveBonus}, DType::BF16, 2, 150, 1, 128,
                  64, {}});
      return 0.0;
    });
    // tensor-core delta path (chunk_backward_delta.cu): gated varlen, then no decay
    Case e{{DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, DType::BF16, 1, 70, 1, 64, 128, {0, 30, 70}};
    runBwdCase(e);
    e.kind.decay = DecayClass::None; e.dtype = DType::F32; e.cu = {}; e.B = 2; e.T = 80; e.dk = 128; e.dv = 64;
    runBwdCase(e);
    // DeltaNet's heads, dk = dv = 128, varlen with a partial chunk: the fused reverse pass's
    // shape (with --hopper-fused-reverse), so the sanitizers see it
    runBwdCase({{DecayClass::None, UpdateRule::Delta, Readout::Inclusive}, DType::BF16, 1, 150, 1, 128, 128,
                {0, 70, 150}});
    // the delta rule at dk 256, dv 512 (the wide Hopper backward unless LINAC_HOPPER_WIDE_BWD=0):
    // varlen with a partial chunk, so the sanitizers see its key and value blocks
    runBwdCase({{DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, DType::BF16, 1, 70, 1, 256, 512,
                {0, 30, 70}});
    // and at dk = dv = 256 (the wide stages)
    runBwdCase({{DecayClass::None, UpdateRule::Delta, Readout::Inclusive}, DType::BF16, 1, 70, 1, 256, 256,
                {0, 30, 70}});
    // the additive rule at dk = dv = 256, scalar decay, varlen with a partial chunk (the key and
    // value stages)
    runBwdCase({{DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 1, 150, 1, 256, 256,
                {0, 70, 150}});
    // the diagonal decay at dk 256, varlen with a partial chunk (its Hopper backward with
    // the mma.sync passes with --env LINAC_HOPPER_DIAG_K256=0)
    runBwdCase({{DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive}, DType::BF16, 1, 150, 1, 256, 128,
                {0, 70, 150}});
    runScanBwdCase(DType::BF16, 1, 50, 64, {0, 20, 50});
  }
}

void runFullCases(bool fwd_only, bool do_bwd) {
  const DecayClass decays[] = {DecayClass::None, DecayClass::Fixed, DecayClass::Scalar, DecayClass::Diagonal};
  const UpdateRule updates[] = {UpdateRule::Additive, UpdateRule::Delta};
  const Readout readouts[] = {Readout::Inclusive, Readout::ExclusiveBonus};
  const DType dtypes[] = {DType::BF16, DType::F32, DType::F16};
  // every kind x dtype, T not a multiple of the chunk, dk != dv, h0 and ht
  for (auto dt : dtypes)
    for (auto up : updates)
      for (auto de : decays)
        for (auto ro : readouts) runChunkCase({{de, up, ro}, dt, 2, 150, 2, 64, 128, {}});
  // shapes: D in {64, 128, 256}, dk > dv, varlen, strong gates, exact chunk multiple, T = 1
  for (auto up : updates)
    for (auto de : {DecayClass::Scalar, DecayClass::Diagonal})
      for (auto dt : {DType::BF16, DType::F32}) {
        runChunkCase({{de, up, Readout::Inclusive}, dt, 1, 100, 2, 128, 64, {}});
        runChunkCase({{de, up, Readout::Inclusive}, dt, 1, 70, 1, 256, 256, {}});
        runChunkCase({{de, up, Readout::ExclusiveBonus}, dt, 1, 300, 2, 64, 64, {0, 1, 64, 129, 200, 300}});
        runChunkCase({{de, up, Readout::Inclusive}, dt, 1, 300, 2, 64, 128, {0, 1, 64, 129, 200, 300}});
        runChunkCase({{de, up, Readout::Inclusive}, dt, 1, 200, 3, 128, 192, {0, 77, 200}});
        Case s{{de, up, Readout::Inclusive}, dt, 2, 130, 2, 64, 64, {}};
        s.gmul = 10; s.gclamp = -5; runChunkCase(s);
        s.gclamp = -20; runChunkCase(s);
        runChunkCase({{de, up, Readout::Inclusive}, dt, 2, 128, 1, 64, 64, {}, 1.0, -1e30, 0.0, false});
        runChunkCase({{de, up, Readout::Inclusive}, dt, 3, 1, 1, 64, 64, {}});
      }
  // the diagonal decay at dk 256 (the Hopper stages): both readouts,
  // varlen with partial chunks, fp16, strong gates
  for (auto ro : readouts) {
    const RecurrenceKind dk256{DecayClass::Diagonal, UpdateRule::Additive, ro};
    runChunkCase({dk256, DType::BF16, 1, 300, 2, 256, 128, {0, 1, 64, 129, 200, 300}});
    runChunkCase({dk256, DType::F16, 2, 100, 1, 256, 256, {}});
    Case s{dk256, DType::BF16, 2, 130, 1, 256, 64, {}};
    s.gmul = 10; s.gclamp = -20; runChunkCase(s);
  }
  // the additive rule's split forward (LINAC_HOPPER_SPLIT_STATE=1): every decay class but the
  // diagonal at dk 64 / 128 / 256, varlen with lengths 1, 63, 65, 71, 100, fp16, strong gates,
  // without h0, more value blocks than the output stage's one
  withEnv("LINAC_HOPPER_SPLIT_STATE", "1", [] {
    for (auto de : {DecayClass::None, DecayClass::Fixed, DecayClass::Scalar}) {
      const RecurrenceKind ad{de, UpdateRule::Additive, Readout::Inclusive};
      runChunkCase({ad, DType::BF16, 2, 150, 2, 64, 128, {}});
      runChunkCase({ad, DType::BF16, 1, 300, 2, 128, 64, {0, 1, 64, 129, 200, 300}});
      runChunkCase({ad, DType::F16, 2, 100, 1, 256, 256, {}});
      Case s{ad, DType::BF16, 2, 130, 2, 128, 128, {}};
      s.gmul = 10; s.gclamp = -20; runChunkCase(s);
      runChunkCase({ad, DType::BF16, 1, 1000, 1, 128, 256, {}, 1.0, -1e30, 0.0, false});
    }
    return 0.0;
  });
  // in segments (pinned; the default for padded batches where the state stage's grid leaves
  // SMs idle): T a multiple of the chunk and not, fp16 at dk 256, strong gates, without h0;
  // at the default count (one-chunk segments at these sizes), then pinned at 2 and 3 a
  // sequence (several chunks each, the last partial or shorter); the split stages, then the
  // fused stage corrected (LINAC_HOPPER_SEGMENTED_FUSED=1)
  auto segmentCases = [](std::initializer_list<DecayClass> decays) {
    for (auto de : decays) {
      const RecurrenceKind ad{de, UpdateRule::Additive, Readout::Inclusive};
      runChunkCase({ad, DType::BF16, 2, 640, 2, 64, 128, {}});
      runChunkCase({ad, DType::BF16, 1, 1000, 1, 128, 64, {}});
      runChunkCase({ad, DType::F16, 2, 300, 1, 256, 256, {}});
      Case s{ad, DType::BF16, 2, 330, 2, 128, 128, {}};
      s.gmul = 10; s.gclamp = -20; runChunkCase(s);
      runChunkCase({ad, DType::BF16, 3, 512, 1, 128, 128, {}, 1.0, -1e30, 0.0, false});
    }
    return 0.0;
  };
  for (const char* fused : {"0", "1"})
    withEnv("LINAC_HOPPER_SEGMENTED_FUSED", fused, [&] {
      return withEnv("LINAC_HOPPER_SEGMENTS", "1", [&] {
        segmentCases({DecayClass::None, DecayClass::Fixed, DecayClass::Scalar});
        for (const char* count : {"2", "3"})
          withEnv("LINAC_HOPPER_SEGMENT_COUNT", count,
                  [&] { return segmentCases({DecayClass::Fixed, DecayClass::Scalar}); });
        return 0.0;
      });
    });
  // ... and over whole sequences (LINAC_HOPPER_SEGMENTS=0), the fused state-and-output stage
  // that the padded cases above would otherwise leave to segments at these grid sizes
  withEnv("LINAC_HOPPER_SEGMENTS", "0", [] {
    for (auto de : {DecayClass::None, DecayClass::Fixed, DecayClass::Scalar}) {
      const RecurrenceKind ad{de, UpdateRule::Additive, Readout::Inclusive};
      runChunkCase({ad, DType::BF16, 2, 150, 2, 64, 128, {}});
      runChunkCase({ad, DType::F16, 2, 100, 1, 256, 256, {}});
      Case s{ad, DType::BF16, 2, 130, 2, 128, 128, {}};
      s.gmul = 10; s.gclamp = -20; runChunkCase(s);
      runChunkCase({ad, DType::BF16, 2, 128, 1, 64, 64, {}, 1.0, -1e30, 0.0, false});
    }
    return 0.0;
  });
  if (fwd_only) {  // the Hopper path's classes with fp16 and a long multi-chunk case
    for (auto up : updates)
      for (auto de : {DecayClass::None, DecayClass::Fixed, DecayClass::Scalar}) {
        runChunkCase({{de, up, Readout::Inclusive}, DType::F16, 1, 300, 2, 128, 128, {0, 100, 300}});
        runChunkCase({{de, up, Readout::Inclusive}, DType::BF16, 1, 1000, 1, 128, 256, {}});
        // more value blocks than fit two per SM at BV = 32: the state stage takes BV = 64
        runChunkCase({{de, up, Readout::Inclusive}, DType::BF16, 4, 130, 40, 64, 128, {}});
        // wide heads (the Hopper stages unless LINAC_HOPPER_WIDE=0): Gated DeltaNet's 340m
        // head dims, varlen, and fp16 at dk 256
        runChunkCase({{de, up, Readout::Inclusive}, DType::BF16, 1, 150, 1, 256, 512, {0, 70, 150}});
        runChunkCase({{de, up, Readout::Inclusive}, DType::F16, 2, 100, 1, 256, 128, {}});
      }
  }
  if (!fwd_only)
  for (auto dt : dtypes)
    for (auto up : updates)
      for (auto de : decays)
        for (auto ro : readouts) runStepCase({de, up, ro}, dt, 3, 2, 64, 96);
  if (!fwd_only) {
    runStepCase({DecayClass::Diagonal, UpdateRule::Delta, Readout::Inclusive}, DType::BF16, 2, 2, 256, 256);
    for (auto dt : dtypes) {
      runScanCase(dt, 2, 333, 200, {});
      runScanCase(dt, 1, 300, 64, {0, 5, 100, 300});
    }
  }
  if (do_bwd) {
    // backward: every kind x dtype (T not a multiple of the chunk, dk != dv, h0 and d_ht)
    for (auto dt : dtypes)
      for (auto up : updates)
        for (auto de : decays)
          for (auto ro : readouts) runBwdCase({{de, up, ro}, dt, 2, 150, 2, 64, 128, {}});
    for (auto up : updates)
      for (auto de : {DecayClass::Fixed, DecayClass::Scalar, DecayClass::Diagonal})
        for (auto dt : {DType::BF16, DType::F32}) {
          runBwdCase({{de, up, Readout::Inclusive}, dt, 1, 100, 2, 128, 64, {}});
          runBwdCase({{de, up, Readout::ExclusiveBonus}, dt, 1, 300, 2, 64, 64, {0, 1, 64, 129, 200, 300}});
          Case s{{de, up, Readout::Inclusive}, dt, 2, 130, 2, 64, 64, {}};
          s.gmul = 10; s.gclamp = -5; runBwdCase(s);
          s.gclamp = -20; runBwdCase(s);
          runBwdCase({{de, up, Readout::Inclusive}, dt, 2, 128, 1, 128, 128, {}, 1.0, -1e30, 0.0, false});
        }
    runBwdCase({{DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, DType::BF16, 1, 70, 1, 256, 256, {}});
    // tensor-core additive path (None / Fixed / Scalar, inclusive): varlen with lengths 1, 63,
    // 65, 71, 100; dk 256 != dv; T an exact chunk multiple; dv of 3 value blocks; no h0 / d_ht;
    // null d_q and d_g; strong gates.
    for (auto dt : dtypes)
      for (auto de : {DecayClass::None, DecayClass::Fixed, DecayClass::Scalar}) {
        const RecurrenceKind ak{de, UpdateRule::Additive, Readout::Inclusive};
        runBwdCase({ak, dt, 1, 300, 2, 64, 64, {0, 1, 64, 129, 200, 300}});
        runBwdCase({ak, dt, 1, 300, 1, 128, 128, {0, 100, 300}, 1.0, -1e30, 0.0, false});
        runBwdCase({ak, dt, 2, 70, 1, 256, 128, {}});
        runBwdCase({ak, dt, 1, 128, 2, 256, 256, {}});
        runBwdCase({ak, dt, 1, 100, 2, 128, 192, {}, 1.0, -1e30, 0.0, false});
        Case c{ak, dt, 2, 90, 2, 64, 128, {}};
        c.all_grads = false; runBwdCase(c);
        c.all_grads = true; c.gmul = 10; c.gclamp = -20; runBwdCase(c);
      }
    runBwdCase({{DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive}, DType::F32, 1, 70, 1, 256, 128, {}});
    // the diagonal decay's shapes for its Hopper gradient stage (the default for both
    // readouts): dk = dv = 128 varlen with lengths 1, 63, 65, 71,
    // 100 and strong gates, both readouts; fp16 dk 64 < dv over four chunks; null d_q and d_g;
    // RWKV-6's decay -exp(w), w ~ N(0, 1.5^2), with d_w = d_g . g checked (strongly decaying
    // channels' small d_g weigh most there)
    for (auto ro : readouts) {
      const RecurrenceKind gk{DecayClass::Diagonal, UpdateRule::Additive, ro};
      Case c{gk, DType::BF16, 1, 300, 2, 128, 128, {0, 1, 64, 129, 200, 300}};
      c.gmul = 10; c.gclamp = -20; runBwdCase(c);
      runBwdCase({gk, DType::F16, 2, 256, 1, 64, 128, {}});
      Case n{gk, DType::BF16, 2, 90, 2, 128, 64, {}};
      n.all_grads = false; runBwdCase(n);
      for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
        Case w{gk, dt, 2, 200, 2, 128, 128, {}};
        w.kind.preciseDecayGrad = true;  // as linac-select-algorithm marks an exp-factor decay
        w.wsigma = 1.5; runBwdCase(w);
      }
    }
    // its state passes in segments (diag_state_scan.cuh; the default at these grid sizes, one
    // chunk a segment there), pinned at 2 and 3 a sequence (several chunks each, the last
    // shorter), then over whole sequences (LINAC_HOPPER_SEGMENTS=0)
    auto diagSegmentCases = [&] {
      for (auto ro : readouts) {
        const RecurrenceKind gk{DecayClass::Diagonal, UpdateRule::Additive, ro};
        runBwdCase({gk, DType::BF16, 2, 330, 2, 128, 128, {}});
        Case c{gk, DType::BF16, 2, 300, 1, 64, 128, {}};
        c.gmul = 10; c.gclamp = -20; runBwdCase(c);
        runBwdCase({gk, DType::BF16, 1, 256, 2, 256, 128, {}, 1.0, -1e30, 0.0, false});
        Case w{gk, DType::F16, 2, 200, 2, 128, 128, {}};
        w.kind.preciseDecayGrad = true;
        w.wsigma = 1.5; runBwdCase(w);
      }
      return 0.0;
    };
    for (const char* count : {"2", "3"}) withEnv("LINAC_HOPPER_SEGMENT_COUNT", count, diagSegmentCases);
    withEnv("LINAC_HOPPER_SEGMENTS", "0", diagSegmentCases);
    // value dims above 128 (GLA at its 340m heads: dk 128, dv 256; the Hopper stage's value
    // blocks, or the mma.sync passes with --no-hopper-diag-wide): varlen with strong gates,
    // fp16 dk 64 x dv 384 over four chunks, null d_q and d_g
    {
      const RecurrenceKind gk{DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive};
      Case c{gk, DType::BF16, 1, 300, 2, 128, 256, {0, 1, 64, 129, 200, 300}};
      c.gmul = 10; c.gclamp = -20; runBwdCase(c);
      runBwdCase({gk, DType::F16, 2, 256, 1, 64, 384, {}});
      Case n{gk, DType::BF16, 2, 90, 2, 128, 256, {}};
      n.all_grads = false; runBwdCase(n);
    }
    // the delta rule's shapes for the Hopper backward (taken with --hopper-bwd, else by
    // chunk_backward_delta.cu): varlen with lengths 1, 63, 65, 71, 100; dk = dv = 128 varlen
    // without h0 / d_ht, and with them over three chunks of two sequences with strong gates
    // (the fused reverse pass's two warpgroups); dk 128 > dv over four chunks; null d_q and
    // d_g; fp16 too.
    for (auto dt : {DType::BF16, DType::F16})
      for (auto de : {DecayClass::None, DecayClass::Scalar}) {
        const RecurrenceKind dn{de, UpdateRule::Delta, Readout::Inclusive};
        runBwdCase({dn, dt, 1, 300, 2, 64, 64, {0, 1, 64, 129, 200, 300}});
        runBwdCase({dn, dt, 1, 300, 1, 128, 128, {0, 100, 300}, 1.0, -1e30, 0.0, false});
        Case s{dn, dt, 2, 150, 2, 128, 128, {}};
        s.gmul = 10; s.gclamp = -20; runBwdCase(s);
        runBwdCase({dn, dt, 2, 200, 1, 128, 64, {}});
        Case c{dn, dt, 2, 90, 2, 64, 128, {}};
        c.all_grads = false; runBwdCase(c);
      }
    // the delta rule at Gated DeltaNet's 340m heads (dk 256, dv 512: the Hopper backward unless
    // LINAC_HOPPER_WIDE_BWD=0, then the mma.sync kernels): varlen with lengths 1, 63, 65, 71, 100;
    // fp16 without h0 / d_ht; strong gates; null d_q and d_g
    for (auto de : {DecayClass::None, DecayClass::Scalar}) {
      const RecurrenceKind dn{de, UpdateRule::Delta, Readout::Inclusive};
      runBwdCase({dn, DType::BF16, 1, 300, 1, 256, 512, {0, 1, 64, 129, 200, 300}});
      runBwdCase({dn, DType::F16, 2, 100, 1, 256, 512, {}, 1.0, -1e30, 0.0, false});
      Case c{dn, DType::BF16, 2, 130, 1, 256, 512, {}};
      c.gmul = 10; c.gclamp = -20; runBwdCase(c);
      c.gmul = 1; c.gclamp = -1e30; c.all_grads = false; runBwdCase(c);
      // dk = dv = 256 (issue 11's D256 shape; the wide stages)
      runBwdCase({dn, DType::BF16, 1, 300, 1, 256, 256, {0, 1, 64, 129, 200, 300}});
      runBwdCase({dn, DType::F16, 2, 100, 1, 256, 256, {}, 1.0, -1e30, 0.0, false});
      Case w{dn, DType::BF16, 2, 130, 1, 256, 256, {}};
      w.gmul = 10; w.gclamp = -20; runBwdCase(w);
    }
    // the additive rule at dk 256 (the key and value stages):
    // every decay class but the diagonal; varlen with lengths 1, 63, 65, 71, 100; dv 128 and
    // 512; fp16 without h0 / d_ht; strong gates; null d_q and d_g
    for (auto de : {DecayClass::None, DecayClass::Fixed, DecayClass::Scalar}) {
      const RecurrenceKind ad{de, UpdateRule::Additive, Readout::Inclusive};
      runBwdCase({ad, DType::BF16, 1, 300, 2, 256, 256, {0, 1, 64, 129, 200, 300}});
      runBwdCase({ad, DType::BF16, 2, 100, 1, 256, 128, {}});
      runBwdCase({ad, DType::F16, 2, 100, 1, 256, 512, {}, 1.0, -1e30, 0.0, false});
      Case c{ad, DType::BF16, 2, 130, 1, 256, 256, {}};
      c.gmul = 10; c.gclamp = -20; runBwdCase(c);
      c.gmul = 1; c.gclamp = -1e30; c.all_grads = false; runBwdCase(c);
    }
    // the diagonal decay at dk 256 (its Hopper backward): the inclusive
    // readout in value blocks (dv 256), varlen; fp16; strong gates; RWKV-6's readout and
    // decay (two 16-bit halves) at dv 128 and in value blocks
    {
      const RecurrenceKind gla{DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive};
      runBwdCase({gla, DType::BF16, 1, 300, 2, 256, 256, {0, 1, 64, 129, 200, 300}});
      runBwdCase({gla, DType::F16, 2, 100, 1, 256, 128, {}});
      Case sg{gla, DType::BF16, 2, 130, 1, 256, 128, {}};
      sg.gmul = 10; sg.gclamp = -20; runBwdCase(sg);
      Case rw{{DecayClass::Diagonal, UpdateRule::Additive, Readout::ExclusiveBonus, true}, DType::BF16, 2, 130, 1,
              256, 128, {}};
      rw.wsigma = 1.5; runBwdCase(rw);
      // ... and in value blocks (RWKV-6 at D256), varlen
      Case rv{rw.kind, DType::BF16, 1, 300, 2, 256, 256, {0, 1, 64, 129, 200, 300}};
      rv.wsigma = 1.5; runBwdCase(rv);
    }
    for (auto dt : dtypes) {
      runScanBwdCase(dt, 2, 333, 200, {});
      runScanBwdCase(dt, 1, 300, 64, {0, 5, 100, 300});
    }
  }
}

}  // namespace lab
