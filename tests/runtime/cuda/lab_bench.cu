// The kernel lab's timings: the autotuner's check on this GPU (checkAutotune), the forward table
// (bench) and the forward+backward table (benchBackward), with --bench-rows' filter.
#include "autotune.h"
#include "lab_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace lab {
namespace {

template <typename F> double medianMs(F&& f, int warm = 5, int reps = 30) {
  cudaEvent_t e0, e1;
  LINAC_CUDA_CHECK(cudaEventCreate(&e0));
  LINAC_CUDA_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < warm; ++i) f();
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    LINAC_CUDA_CHECK(cudaEventRecord(e0));
    f();
    LINAC_CUDA_CHECK(cudaEventRecord(e1));
    LINAC_CUDA_CHECK(cudaEventSynchronize(e1));
    float t;
    LINAC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  LINAC_CUDA_CHECK(cudaEventDestroy(e0));
  LINAC_CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// Runs f with the Hopper stages on (the default dispatch) or off (LINAC_HOPPER=0).
template <class F>
double withHopper(bool on, F&& f) {
  if (on) unsetenv("LINAC_HOPPER");
  else setenv("LINAC_HOPPER", "0", 1);
  const double ms = f();
  unsetenv("LINAC_HOPPER");
  return ms;
}

__global__ void spinKernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

/// The autotuner (autotune.h) on this GPU, with two candidates that spin one CTA for about 25 and
/// 100 us: the first call times both (a warm-up and five runs each) and picks the shorter, a second
/// call takes the recorded choice without running either, and with LINAC_AUTOTUNE=0 or during a
/// stream capture a new shape class gets the fallback, untimed. The cache is this process's only
/// (main sets LINAC_AUTOTUNE_CACHE to "").
/// --untimed (the sanitizer runs): instrumentation distorts kernel times, so the first check
/// holds the runs' counts and not which candidate won.
bool g_untimed = false;

void checkAutotune() {
  constexpr long long kCycles = 50000;
  int longRuns = 0, shortRuns = 0;
  auto spin = [](long long cycles, cudaStream_t stream, int* runs) {
    return [cycles, stream, runs] {
      spinKernel<<<1, 32, 0, stream>>>(cycles);
      LINAC_CUDA_CHECK_LAUNCH("spinKernel");
      ++*runs;
    };
  };
  const std::vector<kc::TuneCandidate> candidates{{"long", spin(4 * kCycles, nullptr, &longRuns)},
                                                  {"short", spin(kCycles, nullptr, &shortRuns)}};
  auto check = [](const char* what, bool ok) {
    if (!ok) ++g_fail;
    std::printf("%-28s %-5s %-34s %-4s %10s  %s\n", "autotune", "-", what, "-", "-", ok ? "PASS" : "FAIL");
  };
  const size_t timed = kc::chooseCandidate("lab.spin", "one CTA", candidates, 0, nullptr);
  check(g_untimed ? "times both (untimed run: any winner)" : "times both, picks the faster",
        (g_untimed || candidates[timed].name == "short") && longRuns == 6 && shortRuns == 6);
  const size_t recorded = kc::chooseCandidate("lab.spin", "one CTA", candidates, 0, nullptr);
  check("recorded choice, nothing run", recorded == timed && longRuns == 6 && shortRuns == 6);
  size_t disabled = 1;
  withEnv("LINAC_AUTOTUNE", "0", [&] {
    disabled = kc::chooseCandidate("lab.spin", "another class", candidates, 0, nullptr);
    return 0.0;
  });
  check("LINAC_AUTOTUNE=0: the fallback", disabled == 0 && longRuns == 6 && shortRuns == 6);
  cudaStream_t stream;
  LINAC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int capturedRuns = 0;
  const std::vector<kc::TuneCandidate> onStream{{"long", spin(4 * kCycles, stream, &capturedRuns)},
                                                {"short", spin(kCycles, stream, &capturedRuns)}};
  LINAC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  const size_t captured = kc::chooseCandidate("lab.spin", "captured class", onStream, 0, stream);
  cudaGraph_t graph;
  LINAC_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LINAC_CUDA_CHECK(cudaGraphDestroy(graph));
  LINAC_CUDA_CHECK(cudaStreamDestroy(stream));
  check("capturing a graph: the fallback", captured == 0 && capturedRuns == 0);
}

/// The timing rows to run: all, or (--bench-rows TEXT) those whose name contains TEXT, or one of
/// TEXT's comma-separated parts. The forward table's rows at its other shapes are named with the
/// backward rows' shape tokens ("RetNet   additive-fixed T16384"), and run under a filter only
/// where a part names the token: "additive-fixed" is the first shape's row, "T16384" every row
/// at that shape.
const char* benchRows = nullptr;
namespace {
bool benchRow(const char* name) { return matchesAny(benchRows, name); }
}  // namespace

void bench() {
  struct Row { const char* name; RecurrenceKind kind; double anchor; };
  const Row rows[] = {
      {"RetNet   additive-fixed", {DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive}, 0.488},
      {"sGLA     additive-scalar", {DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, 0.397},
      {"GLA      additive-diag", {DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive}, 0.714},
      {"RWKV-6   additive-diag-bonus", {DecayClass::Diagonal, UpdateRule::Additive, Readout::ExclusiveBonus}, 0.906},
      {"DeltaNet delta-none", {DecayClass::None, UpdateRule::Delta, Readout::Inclusive}, 0.528},
      {"GDN      delta-scalar", {DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, 0.432},
  };
  // One row: the default dispatch, the opt-in paths, the mma.sync skeleton.
  auto timeRow = [](const char* name, const RecurrenceKind& kind, int B, int T, int H, int dk, int dv,
                    const char* fla) {
    Inputs in = makeInputs(kind, DType::BF16, B, T, H, dk, dv, B, 1.0, -1e30, false);
    const size_t tok = size_t(B) * T * H;
    DevBuf q(in.qb.data(), in.qb.size()), k(in.kb.data(), in.kb.size()), v(in.vb.data(), in.vb.size());
    DevBuf g(in.g.data(), in.g.size() * 4), beta(in.beta.data(), in.beta.size() * 4),
        u(in.u.data(), in.u.size() * 4);
    DevBuf o(tok * dv * 2), ht(size_t(B) * H * dk * dv * 4);
    RecurrenceShape shape;
    shape.batch = B; shape.seq_len = T; shape.heads = H; shape.key_dim = dk; shape.value_dim = dv;
    shape.num_seqs = B;
    RecurrenceForwardArgs a;
    a.q = q.p; a.k = k.p; a.v = v.p; a.g = g.as<float>(); a.beta = beta.as<float>(); a.u = u.as<float>();
    a.scale = float(1.0 / std::sqrt(double(dk))); a.o = o.p; a.ht = ht.as<float>();
    auto run = [&] { return medianMs([&] { kc::chunkForward(kind, DType::BF16, shape, a, nullptr); }); };
    const double ms = withHopper(true, run), old = withHopper(false, run);
    const bool delta = kind.update == UpdateRule::Delta;
    char column[16] = "-", overlap[16] = "-", early[16] = "-", inline_[16] = "-", blocks32[16] = "-",
         split[16] = "-", whole[16] = "-";
    int smCount = 0;
    LINAC_CUDA_CHECK(cudaDeviceGetAttribute(&smCount, cudaDevAttrMultiProcessorCount, 0));
    // the additive rule's other paths over whole sequences (segments, its default where they
    // apply, would take their place)
    const bool additive = !delta && kind.decay != DecayClass::Diagonal;
    auto unsegmented = [&](const char* name, const char* value) {
      return withEnv(name, value, [&] { return additive ? withEnv("LINAC_HOPPER_SEGMENTS", "0", run) : run(); });
    };
    if (dk <= 128 && (dv / 32) * H * B < smCount)  // the state stage's blocks of 16 apply
      std::snprintf(blocks32, sizeof blocks32, "%.3f", unsegmented("LINAC_HOPPER_NARROW_STATE", "0"));
    if (additive) {
      std::snprintf(inline_, sizeof inline_, "%.3f", unsegmented("LINAC_HOPPER_PREPARED_SCORES", "0"));
      std::snprintf(split, sizeof split, "%.3f", unsegmented("LINAC_HOPPER_SPLIT_STATE", "1"));
      if ((dv / 32) * H * B < smCount)  // segments apply (forward.cu, segmentsApply)
        std::snprintf(whole, sizeof whole, "%.3f", withEnv("LINAC_HOPPER_SEGMENTS", "0", run));
    }
    if (delta) {
      std::snprintf(column, sizeof column, "%.3f", withEnv("LINAC_HOPPER_BLOCK_INVERSE", "0", run));
      std::snprintf(overlap, sizeof overlap, "%.3f", withEnv("LINAC_HOPPER_OVERLAP", "1", run));
      if (kind.decay == DecayClass::Scalar && dk <= 128)  // late loads: a scalar decay's default
                                                          // (and the only choice above dk 128)
        std::snprintf(early, sizeof early, "%.3f", withEnv("LINAC_HOPPER_LATE", "0", run));
    }
    char dims[32];
    if (dk == dv) std::snprintf(dims, sizeof dims, "%d,%d,%d,%d", B, T, H, dk);
    else std::snprintf(dims, sizeof dims, "%d,%d,%d,%dx%d", B, T, H, dk, dv);
    std::printf("%-30s %-18s %10.3f %10s %10s %10s %10s %10s %10s %10s %10.3f %10s\n", name, dims, ms, column,
                overlap, early, inline_, blocks32, split, whole, old, fla);
  };
  struct Shape { int B, T, H, D; const char* token; };  // token: the shape's name in --bench-rows
  const Shape shapes[] = {
      {8, 4096, 8, 128, ""}, {2, 16384, 4, 128, "T16384"}, {8, 4096, 8, 64, "D64"}, {8, 4096, 8, 256, "D256"}};
  std::printf("\nforward timing, bf16 (median of 30 after 5 warm-ups); 'default' is the dispatch\n"
              "(Hopper stages where they apply), 'mma.sync' the skeleton (LINAC_HOPPER=0); fla: 0.6.0\n"
              "on an H200 at B8 T4096 H8 D128, 2026-12-03, an anchor from another call (bench/NOTES.md,\n"
              "Hopper forward; same-call ratios: bench/run_h200.sh lab, bench/compare.py)\n");
  std::printf("('column': LINAC_HOPPER_BLOCK_INVERSE=0, the delta rule's (I + A)^-1 one column per thread;\n"
              " 'overlap': LINAC_HOPPER_OVERLAP=1, its state stage's overlapped order; 'early':\n"
              " LINAC_HOPPER_LATE=0, a scalar decay's state stage with two stages of q / w;\n"
              " 'inline': LINAC_HOPPER_PREPARED_SCORES=0, the additive rule's chunk scores formed in the\n"
              " state stage, not by their chunk-parallel preparation; 'blocks32':\n"
              " LINAC_HOPPER_NARROW_STATE=0, the state stage in value blocks of 32 where the default takes\n"
              " 16 because 32 leave SMs idle; 'split': LINAC_HOPPER_SPLIT_STATE=1, the additive rule's\n"
              " state pass with K^T V alone, then every chunk's output in parallel; 'whole':\n"
              " LINAC_HOPPER_SEGMENTS=0, the additive rule's default stages over whole sequences where\n"
              " the default runs the split stages over segments of each sequence, scanned)\n");
  std::printf("%-30s %-18s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "kind", "B,T,H,D", "default",
              "column", "overlap", "early", "inline", "blocks32", "split", "whole", "mma.sync", "fla");
  for (const auto& sh : shapes)
    for (const auto& r : rows) {
      const std::string label = *sh.token ? std::string(r.name) + " " + sh.token : std::string(r.name);
      if (!benchRow(label.c_str())) continue;
      if (benchRows != nullptr && *sh.token && std::strstr(benchRows, sh.token) == nullptr) continue;
      const bool anchor = sh.B == 8 && sh.T == 4096 && sh.H == 8 && sh.D == 128;
      timeRow(r.name, r.kind, sh.B, sh.T, sh.H, sh.D, sh.D, anchor ? std::to_string(r.anchor).substr(0, 5).c_str() : "-");
    }
  // Gated DeltaNet's heads at the 340m preset (dk 256, dv 512; the Hopper stages unless LINAC_HOPPER_WIDE=0)
  if (benchRow("GDN 340m"))
    timeRow("GDN 340m heads", {DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, 4, 4096, 4, 256, 512, "-");
  const int B = 8, T = 4096;
  if (benchRow("HGRN scan")) {  // HGRN scan, d = 1024
    const int Dh = 1024;
    const size_t n = size_t(B) * T * Dh;
    std::vector<float> x(n), g(n);
    fillNormal(x);
    fillDrawn(g, logsigmoid);
    auto xb = encode(x, DType::BF16);
    DevBuf xd(xb.data(), xb.size()), gd(g.data(), n * 4), hd(n * 2), htd(size_t(B) * Dh * 4);
    ScanShape shape;
    shape.batch = B; shape.seq_len = T; shape.channels = Dh; shape.num_seqs = B;
    ScanForwardArgs a;
    a.x = xd.p; a.g = gd.as<float>(); a.h = hd.p; a.ht = htd.as<float>();
    const double ms = medianMs([&] { kc::scanForward(DType::BF16, shape, a, nullptr); });
    std::printf("%-30s %10.3f %10.2f %8.2fx  (fla anchor is the whole HGRN layer)\n", "HGRN scan d=1024", ms, 1.82, ms / 1.82);
  }
}


void benchBackward() {
  const int B = 8, T = 4096, H = 8, D = 128;  // the rows' shape; the last row has its own
  // decayLearned: whether training asks for dg (RetNet's decay is a constant per head, so its
  // fwd+bwd column, the one compared with fla, runs without dg as training does).
  struct Row { const char* name; RecurrenceKind kind; double anchor; bool decayLearned; };
  const Row rows[] = {
      {"LinAttn  additive-none", {DecayClass::None, UpdateRule::Additive, Readout::Inclusive}, 0.0, false},
      {"RetNet   additive-fixed", {DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive}, 1.604, false},
      {"sGLA     additive-scalar", {DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, 1.622, true},
      {"GLA      additive-diag", {DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive}, 2.994, true},
      {"RWKV-6   additive-diag-bonus",  // -exp(w): the compiler marks its d_g precise
       {DecayClass::Diagonal, UpdateRule::Additive, Readout::ExclusiveBonus, true}, 0.0, true},
      {"DeltaNet delta-none", {DecayClass::None, UpdateRule::Delta, Readout::Inclusive}, 1.458, false},
      {"GDN      delta-scalar", {DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, 2.259, true},
  };  // fla 0.6.0 fwd+bwd, same H200, 2026-12-03 (bench/NOTES.md, "Hopper forward on wgmma")
  std::printf("\nforward+backward timing, bf16 B=%d T=%d H=%d dk=dv=%d (median of 20 after 3 warm-ups)\n", B, T, H, D);
  std::printf("(bwd no-dg: the default dispatch with d_g = null, as when a fixed decay is not learned;\n"
              " a fixed decay's dg takes chunk_backward_additive.cu, 3xTF32 in passes 1-2;\n"
              " fwd+bwd: forward + default backward with dg where training learns the decay)\n");
  std::printf("(bwd ms: the mma.sync path, LINAC_HOPPER_BWD=0; hopper bwd: the default dispatch, the\n"
              " wgmma backward where it applies)\n");
  std::printf("(alt: the delta rule's stages 3 and 4 as one reverse pass, LINAC_HOPPER_FUSED_REVERSE=1;\n"
              " the additive rule's two state passes in two launches, LINAC_HOPPER_JOINT_STATE=0, with\n"
              " dg where training learns the decay: compare with 'bwd no-dg' for RetNet; the diagonal\n"
              " decay's state passes over whole sequences, LINAC_HOPPER_SEGMENTS=0, where they take segments)\n");
  std::printf("(fla f+b: fla 0.6.0 on an H200, 2026-12-03, an anchor from another call; fla's ops timed\n"
              " beside the lab in one call: bench/run_h200.sh lab, bench/compare.py)\n");
  std::printf("%-30s %10s %10s %10s %10s %10s %10s %8s\n", "kind", "bwd ms", "hopper bwd", "alt", "bwd no-dg", "fwd+bwd",
              "fla f+b", "ratio");
  auto timeRow = [&](const Row& r, int B, int T, int H, int DK, int DV) {
    Inputs in = makeInputs(r.kind, DType::BF16, B, T, H, DK, DV, B, 1.0, -1e30, false);
    const size_t tok = size_t(B) * T * H;
    std::vector<float> dof(tok * DV);
    fillNormal(dof);
    auto dob = encode(dof, DType::BF16);
    DevBuf q(in.qb.data(), in.qb.size()), k(in.kb.data(), in.kb.size()), v(in.vb.data(), in.vb.size());
    DevBuf g(in.g.data(), in.g.size() * 4), beta(in.beta.data(), in.beta.size() * 4),
        u(in.u.data(), in.u.size() * 4), dO(dob.data(), dob.size());
    DevBuf o(tok * DV * 2), dq(tok * DK * 2), dk(tok * DK * 2), dv(tok * DV * 2),
        dg(in.g.size() * 4), db(in.beta.size() * 4);
    RecurrenceShape shape;
    shape.batch = B; shape.seq_len = T; shape.heads = H; shape.key_dim = DK; shape.value_dim = DV;
    shape.num_seqs = B;
    RecurrenceForwardArgs a;
    a.q = q.p; a.k = k.p; a.v = v.p; a.g = g.as<float>(); a.beta = beta.as<float>(); a.u = u.as<float>();
    a.scale = float(1.0 / std::sqrt(double(DK))); a.o = o.p;
    RecurrenceBackwardArgs ba;
    ba.fwd = a; ba.d_o = dO.p; ba.d_q = dq.p; ba.d_k = dk.p; ba.d_v = dv.p;
    ba.d_g = in.g.empty() ? nullptr : dg.as<float>();
    ba.d_beta = in.beta.empty() ? nullptr : db.as<float>();
    RecurrenceBackwardArgs nb = ba;
    nb.d_g = nullptr;
    const RecurrenceBackwardArgs& trained = r.decayLearned ? ba : nb;
    auto timeBackward = [&](const RecurrenceBackwardArgs& args) {
      return medianMs([&] { kc::chunkBackward(r.kind, DType::BF16, shape, args, nullptr); }, 3, 20);
    };
    auto backward = [&] { return timeBackward(ba); };
    const double bms = withEnv("LINAC_HOPPER_BWD", "0", backward);
    const double hms = backward();
    // alt: the delta rule's stages 3 and 4 as one pass (dk and dv <= 128); the additive rule's
    // state passes in two launches (decay none / fixed / scalar; with dg where training learns
    // the decay, as fwd+bwd: a fixed decay's dg takes the mma.sync passes); the diagonal decay's
    // state passes over whole sequences where they default to segments (diag_state_scan.cuh:
    // fewer than half the SMs' worth of CTAs of 64 columns)
    char alt[16] = "-";
    int smCount = 0;
    LINAC_CUDA_CHECK(cudaDeviceGetAttribute(&smCount, cudaDevAttrMultiProcessorCount, 0));
    if (r.kind.decay == DecayClass::Diagonal && 2 * (DV / 64) * H * 2 * B < smCount)
      std::snprintf(alt, sizeof alt, "%.3f", withEnv("LINAC_HOPPER_SEGMENTS", "0", backward));
    if (r.kind.update == UpdateRule::Delta && DK <= 128 && DV <= 128)
      std::snprintf(alt, sizeof alt, "%.3f", withEnv("LINAC_HOPPER_FUSED_REVERSE", "1", backward));
    if (r.kind.update == UpdateRule::Additive && r.kind.decay != DecayClass::Diagonal)
      std::snprintf(alt, sizeof alt, "%.3f",
                    withEnv("LINAC_HOPPER_JOINT_STATE", "0", [&] { return timeBackward(trained); }));
    const double ms = medianMs([&] {
      kc::chunkForward(r.kind, DType::BF16, shape, a, nullptr);
      kc::chunkBackward(r.kind, DType::BF16, shape, trained, nullptr);
    }, 3, 20);
    double nodg_ms = hms;
    if (ba.d_g)
      nodg_ms = medianMs([&] { kc::chunkBackward(r.kind, DType::BF16, shape, nb, nullptr); }, 3, 20);
    if (r.anchor > 0)
      std::printf("%-30s %10.3f %10.3f %10s %10.3f %10.3f %10.2f %8.2fx\n", r.name, bms, hms, alt, nodg_ms, ms,
                  r.anchor, ms / r.anchor);
    else
      std::printf("%-30s %10.3f %10.3f %10s %10.3f %10.3f %10s %8s\n", r.name, bms, hms, alt, nodg_ms, ms, "-", "-");
  };
  for (const auto& r : rows)
    if (benchRow(r.name)) timeRow(r, B, T, H, D, D);
  // Gated DeltaNet's heads at the 340m preset, B4 T4096 H4 dk 256 dv 512 (the wide Hopper backward
  // in the 'hopper bwd' column unless LINAC_HOPPER_WIDE_BWD=0)
  const Row gdn340m{"GDN 340m heads", {DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, 0.0, true};
  if (benchRow(gdn340m.name)) timeRow(gdn340m, 4, 4096, 4, 256, 512);
  // GLA's heads at the 340m preset, B4 T4096 H4 dk 128 dv 256 ('hopper bwd': the Hopper stages'
  // value blocks, or the mma.sync passes with --no-hopper-diag-wide)
  const Row gla340m{"GLA 340m heads", {DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive}, 0.0, true};
  if (benchRow(gla340m.name)) timeRow(gla340m, 4, 4096, 4, 128, 256);
  // Issue 11's long shape with few heads, B2 T16384 H4 D128: 8 sequences x heads, where the delta
  // rule's fused reverse pass has 8 CTAs and the staged pair 32 per state pass
  const Row longRows[] = {
      {"RetNet   additive-fixed T16384", {DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive}, 0.0, false},
      {"sGLA     additive-scalar T16384", {DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, 0.0, true},
      {"DeltaNet delta-none T16384", {DecayClass::None, UpdateRule::Delta, Readout::Inclusive}, 0.0, false},
      {"GDN      delta-scalar T16384", {DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, 0.0, true},
      {"GLA      additive-diag T16384", {DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive}, 0.0, true}};
  for (const auto& r : longRows)
    if (benchRow(r.name)) timeRow(r, 2, 16384, 4, 128, 128);
  // Issue 11's wide heads, B8 T4096 H8 D256 (dk = dv = 256: the mma.sync backward for every kind
  // until a Hopper one covers it)
  const Row wideRows[] = {
      {"RetNet   additive-fixed D256", {DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive}, 0.0, false},
      {"sGLA     additive-scalar D256", {DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive}, 0.0, true},
      {"DeltaNet delta-none D256", {DecayClass::None, UpdateRule::Delta, Readout::Inclusive}, 0.0, false},
      {"GDN      delta-scalar D256", {DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, 0.0, true},
      {"GLA      additive-diag D256", {DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive}, 0.0, true},
      {"RWKV-6   additive-diag-bonus D256",
       {DecayClass::Diagonal, UpdateRule::Additive, Readout::ExclusiveBonus, true}, 0.0, true}};
  for (const auto& r : wideRows)
    if (benchRow(r.name)) timeRow(r, 8, 4096, 8, 256, 256);
}

}  // namespace lab
