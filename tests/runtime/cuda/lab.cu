// linac_cuda_lab: the kernel lab for runtime/kernels/cuda (llm.c style). For each case it draws
// fresh random inputs with realistic gates, runs the CUDA kernel on NaN-poisoned outputs, and
// compares with a float64 token-by-token recurrence written here from recurrence.h's comments.
// Prints a table (kind, dtype, shape, rel-RMS, PASS/FAIL), then forward timings at fla's anchor
// shape. Exit: 0 all pass, 1 a failure, 77 no GPU (ctest SKIP_RETURN_CODE).
// Backward checks: float64 reverse-mode sweep of the token recurrence (all gradients; a fixed
// decay's d_g, a sum over every token, against the larger of its norm and its per-token terms', as
// `linac verify` measures it); where the path is called deterministic (chunkBackwardAtomics), the
// same bits from a second run ("bits"); forward+backward timings.
// Forward timings run the default dispatch (the Hopper stages on an H200 where they apply) and,
// beside it, the mma.sync skeleton (LINAC_HOPPER=0).
// Usage: linac_cuda_lab [--quick | --fwd-only | --bench-only] [--no-bench] [--no-bwd] [--no-fwd] [--hopper-bwd]
//                       [--hopper-late] [--hopper-diag] [--hopper-column-inverse] [--hopper-wide]
//                       [--hopper-wide-bwd] [--hopper-diag-single] [--no-hopper-diag-wide]
//                       [--hopper-overlap] [--hopper-fused-reverse] [--hopper-auto]
//                       [--env NAME=VALUE] [--bench-rows TEXT] [--cases TEXT]
//                       [--seed N] [--dump-failing DIR] [--untimed]
//   --untimed     under compute-sanitizer: the autotune case checks its runs, not which kernel won
//   --hopper-bwd  forces the Hopper backward where it applies (LINAC_HOPPER_BWD=1, the default on
//                 an H200); the backward timings show it beside the mma.sync path either way
//   --hopper-late the forward cases run the late q / w loads of the delta rule's state stage for
//                 every decay (LINAC_HOPPER_LATE=1; the default times them per shape class)
//   --hopper-diag forces the Hopper stages of a diagonal decay (LINAC_HOPPER_DIAG=1, the default);
//   --hopper-column-inverse  the delta rule's cases take (I + A)^-1 one column per thread in both
//                 preparations (LINAC_HOPPER_BLOCK_INVERSE=0); the forward timings show it beside
//                 the default
//   --hopper-wide forces the Hopper stages for key dim 256 and value dims above 256
//                 (LINAC_HOPPER_WIDE=1, the default; the dk 256 cases, the fwd-only wide-head cases)
//   --hopper-wide-bwd  the delta rule's backward at dk 256, dv 512 takes the Hopper stages
//                 (LINAC_HOPPER_WIDE_BWD=1, the default; LINAC_HOPPER_WIDE_BWD=0 sends the
//                 dk 256 x dv 512 backward cases to the mma.sync kernels)
//   --hopper-diag-single  the diagonal decay's Hopper gradient stage takes Ks and Qs in one 16-bit
//                 half (LINAC_HOPPER_DIAG_BWD=single; the default takes two where the kind's
//                 preciseDecayGrad says so, as the -exp(w) cases and every exclusive readout's
//                 backward set it, see asCompiled; LINAC_HOPPER_DIAG_BWD=0
//                 sends both readouts to the mma.sync passes)
//   --no-hopper-diag-wide  the diagonal decay's backward at dv above 128 on the mma.sync passes
//                 (LINAC_HOPPER_DIAG_WIDE=0) instead of the Hopper stages in value tiles of 128
//   --hopper-overlap  the delta rule's state stage in the overlapped order (LINAC_HOPPER_OVERLAP=1:
//                 W S and K^T X waited for alone, Q S and P X under them); the forward timings
//                 show it beside the default
//   --hopper-fused-reverse  the delta rule's backward stages 3 and 4 as one reverse pass with dS
//                 on chip (LINAC_HOPPER_FUSED_REVERSE=1; dk, dv <= 128); the backward timings
//                 show it beside the default (column 'alt')
//   --env NAME=VALUE  sets one of the kernels' environment switches for this process, e.g.
//                 --env LINAC_HOPPER_JOINT_STATE=0 to run the path a default replaced (the switches:
//                 runtime/kernels/cuda/hopper/hopper_forward.h, hopper_backward.h)
//   --hopper-auto the delta rule's late loads, overlapped order and fused reverse pass, and the
//                 additive rule's prepared scores, timed against their alternatives per shape
//                 class (=auto: kernels/cuda/autotune.h), each case running the winner: the
//                 default, named here to override the environment
//   --fwd-only    the chunk-forward cases (every kind, dtype and shape) and the forward timings
//   --bench-only  the timings alone (forward; backward too unless --no-bwd)
//   --no-fwd      no forward timing rows (the backward's alone, e.g. under ncu)
//   --bench-rows  only the timing rows whose name contains TEXT (e.g. "GDN"; "T16384,D256": any of
//                 several); the forward table's rows at its first shape (B8 T4096 H8 D128) unless a
//                 part names another shape's token (T16384, D64, D256): a short run for a profiler
//   --cases TEXT  only the forward / backward chunk cases whose line ("bwd additive-diag-bonus bf16
//                 B2 T300 H1 dk64 dv128 g>=-20") contains TEXT or one of its comma-separated parts
//                 (the other checks still run), e.g. one case under a sanitizer, in a loop
//   --seed N      the random stream's seed (printed on the device line of every run): replays a run
//   --dump-failing DIR  each backward case with a failing check writes its draw, the float64
//                 reference and the kernels' gradients to DIR/bwd-<n>.bin (lab_dump.h), for
//                 delta_bwd_host_check.py --replay
#include "autotune.h"
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "lab_dump.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace linac::kernels;
namespace kc = linac::kernels::cuda;

namespace {

std::mt19937_64 rng;
double normal() {
  static std::normal_distribution<double> d(0.0, 1.0);
  return d(rng);
}
double logsigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

constexpr size_t kParallelDraw = size_t(1) << 22;  // elements from which an array is drawn in parallel

/// x[i] = f(z_i) with z_i ~ N(0, 1). Arrays below kParallelDraw elements (every correctness
/// case's) take their draws from rng in order, so --seed replays a case; larger ones (the timing
/// rows', up to ~70M elements at D256, which took most of a timing process's time drawn one by one)
/// in blocks over the host's threads, each block from its own generator seeded from rng in block
/// order: the same draws for a seed on any number of threads.
template <class F>
void fillDrawn(std::vector<float>& x, F f) {
  if (x.size() < kParallelDraw) {
    for (auto& e : x) e = float(f(normal()));
    return;
  }
  constexpr size_t kBlock = size_t(1) << 20;
  const size_t blocks = (x.size() + kBlock - 1) / kBlock;
  std::vector<uint64_t> seeds(blocks);
  for (auto& seed : seeds) seed = rng();
  std::atomic<size_t> next{0};
  auto drawBlocks = [&] {
    for (size_t b = next++; b < blocks; b = next++) {
      std::mt19937_64 gen(seeds[b]);
      std::normal_distribution<double> d(0.0, 1.0);
      const size_t end = std::min(x.size(), (b + 1) * kBlock);
      for (size_t i = b * kBlock; i < end; ++i) x[i] = float(f(d(gen)));
    }
  };
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < std::max(1u, std::thread::hardware_concurrency()); ++t) helpers.emplace_back(drawBlocks);
  drawBlocks();
  for (auto& t : helpers) t.join();
}
void fillNormal(std::vector<float>& x, double scale = 1.0) {
  fillDrawn(x, [scale](double z) { return scale * z; });
}

const char* dtypeName(DType d) { return d == DType::F32 ? "f32" : d == DType::BF16 ? "bf16" : "f16"; }
size_t dtypeSize(DType d) { return d == DType::F32 ? 4 : 2; }
const char* decayName(DecayClass d) {
  static const char* n[] = {"none", "fixed", "scalar", "diag"};
  return n[int(d)];
}

/// Rounds to dtype (what the device sees) and returns the encoded bytes.
std::vector<uint8_t> encode(std::vector<float>& x, DType d) {
  std::vector<uint8_t> out(x.size() * dtypeSize(d));
  for (size_t i = 0; i < x.size(); ++i) {
    if (d == DType::F32) {
      std::memcpy(&out[4 * i], &x[i], 4);
    } else if (d == DType::BF16) {
      __nv_bfloat16 b = __float2bfloat16_rn(x[i]);
      x[i] = __bfloat162float(b);
      std::memcpy(&out[2 * i], &b, 2);
    } else {
      __half b = __float2half_rn(x[i]);
      x[i] = __half2float(b);
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}
std::vector<double> decode(const std::vector<uint8_t>& b, DType d, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (d == DType::F32) { float f; std::memcpy(&f, &b[4 * i], 4); out[i] = f; }
    else if (d == DType::BF16) { __nv_bfloat16 h; std::memcpy(&h, &b[2 * i], 2); out[i] = __bfloat162float(h); }
    else { __half h; std::memcpy(&h, &b[2 * i], 2); out[i] = __half2float(h); }
  }
  return out;
}

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) { if (n) LINAC_CUDA_CHECK(cudaMalloc(&p, n)); }
  DevBuf(const void* host, size_t n) : DevBuf(n) {
    if (n) LINAC_CUDA_CHECK(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice));
  }
  ~DevBuf() { if (p) cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void poison() { LINAC_CUDA_CHECK(cudaMemset(p, 0xFF, bytes)); }  // NaN in f32, bf16 and f16
  template <typename T> T* as() const { return static_cast<T*>(p); }
};
template <typename T> std::vector<T> download(const DevBuf& b, size_t n) {
  std::vector<T> h(n);
  LINAC_CUDA_CHECK(cudaMemcpy(h.data(), b.p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

/// ||x - ref|| / ||ref||; NaN / inf (an unwritten, poisoned element) gives +inf.
double relRms(const std::vector<double>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

int g_fail = 0;
uint64_t g_seed = 0;
const char* g_dump_dir = nullptr;  // --dump-failing DIR: each failing backward case's draw (lab_dump.h)
int g_dumps = 0;
void report(const std::string& kind, DType d, const std::string& shape, const char* what, double err) {
  const double tol = d == DType::F32 ? 1e-5 : 5e-3;
  const bool ok = err < tol;
  if (!ok) ++g_fail;
  std::printf("%-28s %-5s %-34s %-4s %10.3e  %s\n", kind.c_str(), dtypeName(d), shape.c_str(), what,
              err, ok ? "PASS" : "FAIL");
}

// ---------------------------------------------------------------------------------------------
struct Case {
  RecurrenceKind kind;
  DType dtype;
  int B, T, H, dk, dv;
  std::vector<int64_t> cu;  // varlen boundaries (B must be 1) or empty
  double gmul = 1.0, gclamp = -1e30;  // g = max(gclamp, gmul * logsigmoid(N(0,1)))
  double wsigma = 0.0;  // > 0: g = -exp(w), w ~ N(0, wsigma^2) (RWKV-6's decay), and d_w = d_g . g checked
  bool h0 = true;      // h0 and d_ht present (else both null)
  bool all_grads = true;  // false: d_q and d_g null (the other gradients still checked)
};

std::string kindName(const RecurrenceKind& k) {
  return std::string(k.update == UpdateRule::Delta ? "delta" : "additive") + "-" + decayName(k.decay) +
         (k.readout == Readout::ExclusiveBonus ? "-bonus" : "");
}

struct Inputs {
  std::vector<float> q, k, v, g, beta, u, h0;
  std::vector<uint8_t> qb, kb, vb;
};

Inputs makeInputs(const RecurrenceKind& kind, DType dt, int B, int T, int H, int dk, int dv, int N,
                  double gmul, double gclamp, bool with_h0, double wsigma = 0.0) {
  Inputs in;
  const size_t tok = size_t(B) * T * H;
  in.q.resize(tok * dk); in.k.resize(tok * dk); in.v.resize(tok * dv);
  fillNormal(in.q);
  fillNormal(in.k);
  fillNormal(in.v);
  if (kind.update == UpdateRule::Delta) {  // DeltaNet: L2-normalized q and k
    for (size_t t = 0; t < tok; ++t)
      for (auto* a : {&in.q, &in.k}) {
        double s = 0;
        for (int c = 0; c < dk; ++c) s += double((*a)[t * dk + c]) * (*a)[t * dk + c];
        const double inv = 1.0 / std::sqrt(s + 1e-6);
        for (int c = 0; c < dk; ++c) (*a)[t * dk + c] = float((*a)[t * dk + c] * inv);
      }
    in.beta.resize(tok);
    fillDrawn(in.beta, [](double z) { return 1.0 / (1.0 + std::exp(-z)); });
  }
  auto gate = [=](double z) { return wsigma > 0 ? -std::exp(wsigma * z) : std::max(gclamp, gmul * logsigmoid(z)); };
  switch (kind.decay) {
    case DecayClass::None: break;
    case DecayClass::Fixed:
      in.g.resize(H);
      for (int h = 0; h < H; ++h) in.g[h] = float(std::log(1.0 - std::pow(2.0, -5.0 - h)));
      break;
    case DecayClass::Scalar: in.g.resize(tok); fillDrawn(in.g, gate); break;
    case DecayClass::Diagonal: in.g.resize(tok * dk); fillDrawn(in.g, gate); break;
  }
  if (kind.readout == Readout::ExclusiveBonus) {
    in.u.resize(size_t(H) * dk);
    fillNormal(in.u, 0.5);
  }
  if (with_h0) {
    in.h0.resize(size_t(N) * H * dk * dv);
    fillNormal(in.h0, 0.5);
  }
  in.qb = encode(in.q, dt); in.kb = encode(in.k, dt); in.vb = encode(in.v, dt);
  return in;
}

/// float64 reference: one token of recurrence.h for one (sequence, head). S [dk x dv] row-major.
void refToken(const RecurrenceKind& kind, int dk, int dv, const float* q, const float* k,
              const float* v, const double* lam, double beta, const float* u, double scale,
              std::vector<double>& S, double* o) {
  std::vector<double> ob(dv, 0.0);
  if (kind.readout == Readout::ExclusiveBonus) {
    double bonus = 0;
    for (int c = 0; c < dk; ++c) bonus += double(q[c]) * u[c] * k[c];
    for (int j = 0; j < dv; ++j) {
      double acc = 0;
      for (int c = 0; c < dk; ++c) acc += S[size_t(c) * dv + j] * q[c];
      ob[j] = acc + bonus * v[j];
    }
  }
  for (int c = 0; c < dk; ++c)
    for (int j = 0; j < dv; ++j) S[size_t(c) * dv + j] *= lam[c];
  if (kind.update == UpdateRule::Delta) {
    for (int j = 0; j < dv; ++j) {
      double ks = 0;
      for (int c = 0; c < dk; ++c) ks += double(k[c]) * S[size_t(c) * dv + j];
      const double d = beta * (v[j] - ks);
      for (int c = 0; c < dk; ++c) S[size_t(c) * dv + j] += double(k[c]) * d;
    }
  } else {
    for (int c = 0; c < dk; ++c)
      for (int j = 0; j < dv; ++j) S[size_t(c) * dv + j] += double(k[c]) * v[j];
  }
  if (kind.readout == Readout::Inclusive) {
    for (int j = 0; j < dv; ++j) {
      double acc = 0;
      for (int c = 0; c < dk; ++c) acc += S[size_t(c) * dv + j] * q[c];
      ob[j] = acc;
    }
  }
  for (int j = 0; j < dv; ++j) o[j] = scale * ob[j];
}

void decayOf(const RecurrenceKind& kind, const Inputs& in, size_t tokhead, int h, int dk, double* lam) {
  for (int c = 0; c < dk; ++c) {
    double g = 0;
    if (kind.decay == DecayClass::Fixed) g = in.g[h];
    else if (kind.decay == DecayClass::Scalar) g = in.g[tokhead];
    else if (kind.decay == DecayClass::Diagonal) g = in.g[tokhead * dk + c];
    lam[c] = std::exp(g);
  }
}

/// Whether `name` contains one of the comma-separated parts of `filter` (null: every name).
bool matchesAny(const char* filter, const std::string& name) {
  if (filter == nullptr) return true;
  const std::string parts = filter;
  for (size_t from = 0; from <= parts.size();) {
    const size_t comma = std::min(parts.find(',', from), parts.size());
    const std::string part = parts.substr(from, comma - from);
    if (!part.empty() && name.find(part) != std::string::npos) return true;
    from = comma + 1;
  }
  return false;
}

/// --cases TEXT: only the chunk cases whose line ("fwd additive-diag bf16 B2 T150 ...", "bwd ...",
/// the kind, dtype and shape columns joined by spaces) contains one of TEXT's comma-separated parts,
/// e.g. a sanitizer's run over one case. The skipped cases draw nothing, so the kept ones see other
/// draws than in a full run at the same --seed.
const char* caseFilter = nullptr;

/// The shape column of a chunk case's lines.
std::string caseShape(const Case& cs, bool backward) {
  char shp[96];
  const bool varlen = !cs.cu.empty();
  const char* gates = cs.gclamp > -1e29 ? (cs.gclamp <= -20 ? " g>=-20" : " g>=-5") : "";
  if (!backward)
    std::snprintf(shp, sizeof shp, "B%d T%d H%d dk%d dv%d%s%s", cs.B, cs.T, cs.H, cs.dk, cs.dv,
                  varlen ? " varlen" : "", gates);
  else
    std::snprintf(shp, sizeof shp, "B%d T%d H%d dk%d dv%d%s%s%s%s%s", cs.B, cs.T, cs.H, cs.dk, cs.dv,
                  varlen ? " varlen" : "", gates, cs.wsigma > 0 ? " g=-exp(w)" : "", cs.h0 ? "" : " noh0",
                  cs.all_grads ? "" : " no-dq-dg");
  return shp;
}

bool caseSelected(const std::string& kind, DType dt, const std::string& shape) {
  return matchesAny(caseFilter, kind + " " + dtypeName(dt) + " " + shape);
}

void runChunkCase(const Case& cs) {
  const auto& kind = cs.kind;
  const int B = cs.B, T = cs.T, H = cs.H, dk = cs.dk, dv = cs.dv;
  const bool varlen = !cs.cu.empty();
  const int N = varlen ? int(cs.cu.size()) - 1 : B;
  const std::string shp = caseShape(cs, false), kn = "fwd " + kindName(kind);
  if (!caseSelected(kn, cs.dtype, shp)) return;
  Inputs in = makeInputs(kind, cs.dtype, B, T, H, dk, dv, N, cs.gmul, cs.gclamp, cs.h0, cs.wsigma);
  const double scale = 1.0 / std::sqrt(double(dk));
  const size_t tok = size_t(B) * T * H;

  // reference
  std::vector<double> o_ref(tok * dv), ht_ref(size_t(N) * H * dk * dv);
  std::vector<double> lam(dk);
  for (int n = 0; n < N; ++n) {
    const int64_t bos = varlen ? cs.cu[n] : int64_t(n) * T;
    const int64_t len = varlen ? cs.cu[n + 1] - cs.cu[n] : T;
    for (int h = 0; h < H; ++h) {
      std::vector<double> S(size_t(dk) * dv, 0.0);
      if (cs.h0)
        for (size_t i = 0; i < S.size(); ++i) S[i] = in.h0[(size_t(n) * H + h) * dk * dv + i];
      for (int64_t t = 0; t < len; ++t) {
        const size_t th = size_t(bos + t) * H + h;
        decayOf(kind, in, th, h, dk, lam.data());
        refToken(kind, dk, dv, &in.q[th * dk], &in.k[th * dk], &in.v[th * dv], lam.data(),
                 in.beta.empty() ? 0.0 : in.beta[th], in.u.empty() ? nullptr : &in.u[size_t(h) * dk],
                 scale, S, &o_ref[th * dv]);
      }
      std::copy(S.begin(), S.end(), ht_ref.begin() + (size_t(n) * H + h) * dk * dv);
    }
  }

  // device
  DevBuf q(in.qb.data(), in.qb.size()), k(in.kb.data(), in.kb.size()), v(in.vb.data(), in.vb.size());
  DevBuf g(in.g.data(), in.g.size() * 4), beta(in.beta.data(), in.beta.size() * 4),
      u(in.u.data(), in.u.size() * 4), h0(in.h0.data(), in.h0.size() * 4);
  DevBuf cu(cs.cu.data(), cs.cu.size() * 8);
  DevBuf o(tok * dv * dtypeSize(cs.dtype)), ht(ht_ref.size() * 4);
  o.poison();
  ht.poison();
  RecurrenceShape shape;
  shape.batch = B; shape.seq_len = T; shape.heads = H; shape.key_dim = dk; shape.value_dim = dv;
  shape.cu_seqlens = varlen ? cu.as<int64_t>() : nullptr;
  shape.num_seqs = N;
  RecurrenceForwardArgs a;
  a.q = q.p; a.k = k.p; a.v = v.p;
  a.g = g.as<float>(); a.beta = beta.as<float>(); a.u = u.as<float>(); a.h0 = h0.as<float>();
  a.scale = float(scale);
  a.o = o.p; a.ht = ht.as<float>();
  kc::chunkForward(kind, cs.dtype, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> ob(o.bytes);
  LINAC_CUDA_CHECK(cudaMemcpy(ob.data(), o.p, o.bytes, cudaMemcpyDeviceToHost));
  const auto o_dev = decode(ob, cs.dtype, tok * dv);
  const auto ht_f = download<float>(ht, ht_ref.size());
  const std::vector<double> ht_dev(ht_f.begin(), ht_f.end());

  report(kn, cs.dtype, shp, "o", relRms(o_dev, o_ref));
  report(kn, cs.dtype, shp, "ht", relRms(ht_dev, ht_ref));
}

void runStepCase(const RecurrenceKind& kind, DType dt, int B, int H, int dk, int dv) {
  Inputs in = makeInputs(kind, dt, B, 1, H, dk, dv, B, 1.0, -1e30, true);
  const double scale = 1.0 / std::sqrt(double(dk));
  std::vector<double> o_ref(size_t(B) * H * dv), S_ref(in.h0.begin(), in.h0.end());
  std::vector<double> lam(dk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const size_t th = size_t(b) * H + h;
      decayOf(kind, in, th, h, dk, lam.data());
      std::vector<double> S(S_ref.begin() + th * dk * dv, S_ref.begin() + (th + 1) * dk * dv);
      refToken(kind, dk, dv, &in.q[th * dk], &in.k[th * dk], &in.v[th * dv], lam.data(),
               in.beta.empty() ? 0.0 : in.beta[th], in.u.empty() ? nullptr : &in.u[size_t(h) * dk],
               scale, S, &o_ref[th * dv]);
      std::copy(S.begin(), S.end(), S_ref.begin() + th * dk * dv);
    }
  DevBuf q(in.qb.data(), in.qb.size()), k(in.kb.data(), in.kb.size()), v(in.vb.data(), in.vb.size());
  DevBuf g(in.g.data(), in.g.size() * 4), beta(in.beta.data(), in.beta.size() * 4),
      u(in.u.data(), in.u.size() * 4), st(in.h0.data(), in.h0.size() * 4);
  DevBuf o(o_ref.size() * dtypeSize(dt));
  o.poison();
  RecurrenceShape shape;
  shape.batch = B; shape.seq_len = 1; shape.heads = H; shape.key_dim = dk; shape.value_dim = dv;
  RecurrenceStepArgs a;
  a.q = q.p; a.k = k.p; a.v = v.p; a.g = g.as<float>(); a.beta = beta.as<float>(); a.u = u.as<float>();
  a.scale = float(scale); a.state = st.as<float>(); a.o = o.p;
  kc::recurrentStep(kind, dt, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> ob(o.bytes);
  LINAC_CUDA_CHECK(cudaMemcpy(ob.data(), o.p, o.bytes, cudaMemcpyDeviceToHost));
  const auto o_dev = decode(ob, dt, o_ref.size());
  const auto sf = download<float>(st, S_ref.size());
  char shp[96];
  std::snprintf(shp, sizeof shp, "B%d H%d dk%d dv%d", B, H, dk, dv);
  report("step " + kindName(kind), dt, shp, "o", relRms(o_dev, o_ref));
  report("step " + kindName(kind), dt, shp, "S", relRms(std::vector<double>(sf.begin(), sf.end()), S_ref));
}

void runScanCase(DType dt, int B, int T, int D, std::vector<int64_t> cuv) {
  const bool varlen = !cuv.empty();
  const int N = varlen ? int(cuv.size()) - 1 : B;
  const size_t n = size_t(B) * T * D;
  std::vector<float> x(n), g(n), h0(size_t(N) * D);
  fillNormal(x);
  fillDrawn(g, logsigmoid);
  fillNormal(h0);
  auto xb = encode(x, dt);
  std::vector<double> h_ref(n), ht_ref(size_t(N) * D);
  for (int s = 0; s < N; ++s) {
    const int64_t bos = varlen ? cuv[s] : int64_t(s) * T, len = varlen ? cuv[s + 1] - cuv[s] : T;
    for (int c = 0; c < D; ++c) {
      double hc = h0[size_t(s) * D + c];
      for (int64_t t = 0; t < len; ++t) {
        const size_t i = size_t(bos + t) * D + c;
        hc = std::exp(double(g[i])) * hc + x[i];
        h_ref[i] = hc;
      }
      ht_ref[size_t(s) * D + c] = hc;
    }
  }
  DevBuf xd(xb.data(), xb.size()), gd(g.data(), n * 4), h0d(h0.data(), h0.size() * 4),
      cu(cuv.data(), cuv.size() * 8), hd(n * dtypeSize(dt)), htd(ht_ref.size() * 4);
  hd.poison();
  htd.poison();
  ScanShape shape;
  shape.batch = B; shape.seq_len = T; shape.channels = D;
  shape.cu_seqlens = varlen ? cu.as<int64_t>() : nullptr; shape.num_seqs = N;
  ScanForwardArgs a;
  a.x = xd.p; a.g = gd.as<float>(); a.h0 = h0d.as<float>(); a.h = hd.p; a.ht = htd.as<float>();
  kc::scanForward(dt, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> hb(hd.bytes);
  LINAC_CUDA_CHECK(cudaMemcpy(hb.data(), hd.p, hd.bytes, cudaMemcpyDeviceToHost));
  const auto h_dev = decode(hb, dt, n);
  const auto htf = download<float>(htd, ht_ref.size());
  char shp[96];
  std::snprintf(shp, sizeof shp, "B%d T%d D%d%s", B, T, D, varlen ? " varlen" : "");
  report("scan hgrn", dt, shp, "h", relRms(h_dev, h_ref));
  report("scan hgrn", dt, shp, "ht", relRms(std::vector<double>(htf.begin(), htf.end()), ht_ref));
}


/// The kind as linac-select-algorithm would mark it: a diagonal decay read out exclusively takes a
/// precise d_g (its tile's precise_decay_grad) whatever the decay's expression.
RecurrenceKind asCompiled(RecurrenceKind kind) {
  if (kind.decay == DecayClass::Diagonal && kind.readout == Readout::ExclusiveBonus) kind.preciseDecayGrad = true;
  return kind;
}

// ---------------------------------------------------------------------------------------------
// Backward: float64 reference = exact reverse-mode sweep of the naive token recurrence (section 3),
// written here independently of the kernels. Loss = <o, d_o> + <ht, d_ht>.
void runBwdCase(const Case& cs) {
  const RecurrenceKind kind = asCompiled(cs.kind);
  const int B = cs.B, T = cs.T, H = cs.H, dk = cs.dk, dv = cs.dv;
  const bool varlen = !cs.cu.empty();
  const int N = varlen ? int(cs.cu.size()) - 1 : B;
  const bool delta = kind.update == UpdateRule::Delta, excl = kind.readout == Readout::ExclusiveBonus;
  const std::string shp = caseShape(cs, true), kn = "bwd " + kindName(kind);
  if (!caseSelected(kn, cs.dtype, shp)) return;
  Inputs in = makeInputs(kind, cs.dtype, B, T, H, dk, dv, N, cs.gmul, cs.gclamp, cs.h0, cs.wsigma);
  const double scale = 1.0 / std::sqrt(double(dk));
  const size_t tok = size_t(B) * T * H, SS = size_t(dk) * dv;
  std::vector<float> dof(tok * dv), dhtf(cs.h0 ? size_t(N) * H * SS : 0);
  fillNormal(dof);
  fillNormal(dhtf);
  auto dob = encode(dof, cs.dtype);

  std::vector<double> rdq(tok * dk, 0), rdk(tok * dk, 0), rdv(tok * dv, 0), rdb(tok, 0),
      rdu(size_t(H) * dk, 0), rdh0(size_t(N) * H * SS, 0);
  std::vector<double> rdg(kind.decay == DecayClass::Fixed ? H : kind.decay == DecayClass::Scalar ? tok
                          : kind.decay == DecayClass::Diagonal ? tok * dk : 0, 0.0);
  // a fixed decay's d_g[h] sums one term a token: their squared norm, the scale its check takes
  double fixedTerms2 = 0.0;
  std::vector<double> lam(dk), o(dv);
  for (int n = 0; n < N; ++n) {
    const int64_t bos = varlen ? cs.cu[n] : int64_t(n) * T;
    const int64_t len = varlen ? cs.cu[n + 1] - cs.cu[n] : T;
    for (int h = 0; h < H; ++h) {
      std::vector<double> St((len + 1) * SS, 0.0);  // St[t] = S_{t-1}
      if (cs.h0)
        for (size_t i = 0; i < SS; ++i) St[i] = in.h0[(size_t(n) * H + h) * SS + i];
      for (int64_t t = 0; t < len; ++t) {
        const size_t th = size_t(bos + t) * H + h;
        std::vector<double> S(St.begin() + t * SS, St.begin() + (t + 1) * SS);
        decayOf(kind, in, th, h, dk, lam.data());
        refToken(kind, dk, dv, &in.q[th * dk], &in.k[th * dk], &in.v[th * dv], lam.data(),
                 in.beta.empty() ? 0.0 : in.beta[th], in.u.empty() ? nullptr : &in.u[size_t(h) * dk],
                 scale, S, o.data());
        std::copy(S.begin(), S.end(), St.begin() + (t + 1) * SS);
      }
      std::vector<double> dS(SS, 0.0), Pp(SS), res(dv), xw(dv), dxw(dv);
      if (cs.h0)
        for (size_t i = 0; i < SS; ++i) dS[i] = dhtf[(size_t(n) * H + h) * SS + i];
      for (int64_t t = len - 1; t >= 0; --t) {
        const size_t th = size_t(bos + t) * H + h;
        const float *q = &in.q[th * dk], *k = &in.k[th * dk], *v = &in.v[th * dv], *d_o = &dof[th * dv];
        const double* P = &St[t * SS];
        decayOf(kind, in, th, h, dk, lam.data());
        const double beta = delta ? in.beta[th] : 0.0;
        for (int c = 0; c < dk; ++c)
          for (int e = 0; e < dv; ++e) Pp[size_t(c) * dv + e] = lam[c] * P[size_t(c) * dv + e];
        for (int e = 0; e < dv; ++e) {
          res[e] = v[e];
          if (delta)
            for (int c = 0; c < dk; ++c) res[e] -= double(k[c]) * Pp[size_t(c) * dv + e];
          xw[e] = delta ? beta * res[e] : double(v[e]);
        }
        // readout
        if (!excl) {
          for (int c = 0; c < dk; ++c) {
            double a = 0;
            for (int e = 0; e < dv; ++e) a += (Pp[size_t(c) * dv + e] + double(k[c]) * xw[e]) * d_o[e];
            rdq[th * dk + c] = scale * a;
            for (int e = 0; e < dv; ++e) dS[size_t(c) * dv + e] += scale * q[c] * d_o[e];
          }
        } else {
          const float* u = &in.u[size_t(h) * dk];
          double vdo = 0, bon = 0;
          for (int e = 0; e < dv; ++e) vdo += double(v[e]) * d_o[e];
          for (int c = 0; c < dk; ++c) {
            double a = 0;
            for (int e = 0; e < dv; ++e) a += P[size_t(c) * dv + e] * d_o[e];
            rdq[th * dk + c] = scale * (a + vdo * u[c] * k[c]);
            rdk[th * dk + c] = scale * vdo * q[c] * u[c];
            rdu[size_t(h) * dk + c] += scale * vdo * q[c] * k[c];
            bon += double(q[c]) * u[c] * k[c];
          }
          for (int e = 0; e < dv; ++e) rdv[th * dv + e] = scale * bon * d_o[e];
        }
        // update S_t = Pp + k xw^T
        for (int e = 0; e < dv; ++e) {
          double a = 0;
          for (int c = 0; c < dk; ++c) a += dS[size_t(c) * dv + e] * k[c];
          dxw[e] = a;
        }
        for (int c = 0; c < dk; ++c) {
          double a = 0;
          for (int e = 0; e < dv; ++e) a += dS[size_t(c) * dv + e] * xw[e];
          rdk[th * dk + c] += a;
        }
        if (delta) {
          double db = 0;
          for (int e = 0; e < dv; ++e) {
            db += dxw[e] * res[e];
            rdv[th * dv + e] += beta * dxw[e];
          }
          rdb[th] = db;
          for (int c = 0; c < dk; ++c) {
            double a = 0;
            for (int e = 0; e < dv; ++e) {
              const double dw = -beta * dxw[e];
              a += Pp[size_t(c) * dv + e] * dw;
              dS[size_t(c) * dv + e] += double(k[c]) * dw;
            }
            rdk[th * dk + c] += a;
          }
        } else {
          for (int e = 0; e < dv; ++e) rdv[th * dv + e] += dxw[e];
        }
        // decay
        double tokenDg = 0.0;
        for (int c = 0; c < dk; ++c) {
          double a = 0;
          for (int e = 0; e < dv; ++e) {
            a += Pp[size_t(c) * dv + e] * dS[size_t(c) * dv + e];
            dS[size_t(c) * dv + e] *= lam[c];
            if (excl) dS[size_t(c) * dv + e] += scale * q[c] * d_o[e];
          }
          if (kind.decay == DecayClass::Fixed) rdg[h] += a;
          else if (kind.decay == DecayClass::Scalar) rdg[th] += a;
          else if (kind.decay == DecayClass::Diagonal) rdg[th * dk + c] = a;
          tokenDg += a;
        }
        fixedTerms2 += tokenDg * tokenDg;
      }
      std::copy(dS.begin(), dS.end(), rdh0.begin() + (size_t(n) * H + h) * SS);
    }
  }

  // device
  const size_t es = dtypeSize(cs.dtype);
  DevBuf q(in.qb.data(), in.qb.size()), k(in.kb.data(), in.kb.size()), v(in.vb.data(), in.vb.size());
  DevBuf g(in.g.data(), in.g.size() * 4), beta(in.beta.data(), in.beta.size() * 4),
      u(in.u.data(), in.u.size() * 4), h0(in.h0.data(), in.h0.size() * 4);
  DevBuf cu(cs.cu.data(), cs.cu.size() * 8), dO(dob.data(), dob.size()), dht(dhtf.data(), dhtf.size() * 4);
  DevBuf dq(tok * dk * es), dkb(tok * dk * es), dvb(tok * dv * es), dg(rdg.size() * 4),
      db(delta ? tok * 4 : 0), du(excl ? rdu.size() * 4 : 0), dh0(rdh0.size() * 4);
  DevBuf* const outs[] = {&dq, &dkb, &dvb, &dg, &db, &du, &dh0};
  auto poisonOutputs = [&] {
    for (DevBuf* b : outs)
      if (b->bytes) b->poison();
  };
  poisonOutputs();
  RecurrenceShape shape;
  shape.batch = B; shape.seq_len = T; shape.heads = H; shape.key_dim = dk; shape.value_dim = dv;
  shape.cu_seqlens = varlen ? cu.as<int64_t>() : nullptr;
  shape.num_seqs = N;
  RecurrenceBackwardArgs a;
  a.fwd.q = q.p; a.fwd.k = k.p; a.fwd.v = v.p;
  a.fwd.g = g.as<float>(); a.fwd.beta = beta.as<float>(); a.fwd.u = u.as<float>(); a.fwd.h0 = h0.as<float>();
  a.fwd.scale = float(scale);
  a.d_o = dO.p; a.d_ht = dht.as<float>();
  a.d_q = cs.all_grads ? dq.p : nullptr; a.d_k = dkb.p; a.d_v = dvb.p;
  a.d_g = cs.all_grads ? dg.as<float>() : nullptr; a.d_beta = db.as<float>();
  a.d_u = du.as<float>(); a.d_h0 = dh0.as<float>();
  kc::chunkBackward(kind, cs.dtype, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  // A path that chunkBackwardAtomics calls deterministic gives the same bits on a second run (into
  // freshly poisoned outputs): the "bits" line (0 when equal).
  const bool deterministic = kc::chunkBackwardAtomics(kind, cs.dtype, shape, a) == nullptr;
  bool sameBits = true;
  if (deterministic) {
    auto bytesOf = [](const DevBuf& b) { return b.bytes ? download<uint8_t>(b, b.bytes) : std::vector<uint8_t>{}; };
    std::vector<std::vector<uint8_t>> first;
    for (const DevBuf* b : outs) first.push_back(bytesOf(*b));
    poisonOutputs();
    kc::chunkBackward(kind, cs.dtype, shape, a, nullptr);
    LINAC_CUDA_CHECK(cudaDeviceSynchronize());
    for (size_t i = 0; i < first.size(); ++i) sameBits &= bytesOf(*outs[i]) == first[i];
  }
  auto get = [&](const DevBuf& b, size_t n, bool typed) {
    if (typed) {
      std::vector<uint8_t> raw(b.bytes);
      LINAC_CUDA_CHECK(cudaMemcpy(raw.data(), b.p, b.bytes, cudaMemcpyDeviceToHost));
      return decode(raw, cs.dtype, n);
    }
    const auto f = download<float>(b, n);
    return std::vector<double>(f.begin(), f.end());
  };
  const int failsBefore = g_fail;
  if (cs.all_grads) report(kn, cs.dtype, shp, "dq", relRms(get(dq, rdq.size(), true), rdq));
  report(kn, cs.dtype, shp, "dk", relRms(get(dkb, rdk.size(), true), rdk));
  report(kn, cs.dtype, shp, "dv", relRms(get(dvb, rdv.size(), true), rdv));
  if (!rdg.empty() && cs.all_grads) {
    std::vector<double> dgv = get(dg, rdg.size(), false);
    double err = relRms(dgv, rdg);
    if (kind.decay == DecayClass::Fixed) {
      // d_g[h] is a sum over every token whose terms can be 10-1000x the total: measured, as `linac
      // verify` measures it (verify/common.cpp, compareTotal), against the larger of the total's
      // norm and the terms' (the error an fp32 sum of those terms leaves is relative to the terms)
      double total2 = 0.0;
      for (double x : rdg) total2 += x * x;
      if (fixedTerms2 > total2) err *= std::sqrt(total2 / fixedTerms2);
    }
    report(kn, cs.dtype, shp, "dg", err);
    if (cs.wsigma > 0) {  // d_w = d_g . dg/dw = d_g . g: the small d_g of strongly decaying channels weigh most
      std::vector<double> rdw(rdg.size());
      for (size_t i = 0; i < rdg.size(); ++i) {
        dgv[i] *= in.g[i];
        rdw[i] = rdg[i] * in.g[i];
      }
      report(kn, cs.dtype, shp, "dw", relRms(dgv, rdw));
    }
  }
  if (delta) report(kn, cs.dtype, shp, "dbet", relRms(get(db, rdb.size(), false), rdb));
  if (excl) report(kn, cs.dtype, shp, "du", relRms(get(du, rdu.size(), false), rdu));
  if (cs.h0) report(kn, cs.dtype, shp, "dh0", relRms(get(dh0, rdh0.size(), false), rdh0));
  if (deterministic) report(kn, cs.dtype, shp, "bits", sameBits ? 0.0 : INFINITY);
  if (!g_dump_dir || g_fail == failsBefore) return;

  // The draw, the float64 reference and the kernels' gradients, for the host to replay.
  lab::CaseDump dump;
  dump.meta("kind", kindName(kind));
  dump.meta("dtype", dtypeName(cs.dtype));
  dump.meta("shape", shp);
  dump.meta("seed", std::to_string(g_seed));
  for (const auto& [key, value] : {std::pair<const char*, int>{"B", B}, {"T", T}, {"H", H}, {"dk", dk}, {"dv", dv}, {"N", N}})
    dump.meta(key, double(value));
  dump.meta("scale", scale);
  dump.meta("precise_decay_grad", kind.preciseDecayGrad ? 1.0 : 0.0);  // the Hopper diagonal stage's two halves
  dump.meta("cu_seqlens", cs.cu);
  const std::vector<int64_t> tokK{B, T, H, dk}, tokV{B, T, H, dv}, tokens{B, T, H}, heads{H, dk},
      states{N, H, dk, dv};
  const std::vector<int64_t> gShape = kind.decay == DecayClass::Fixed      ? std::vector<int64_t>{H}
                                      : kind.decay == DecayClass::Diagonal ? tokK
                                                                           : tokens;
  dump.array("q", in.q, tokK); dump.array("k", in.k, tokK); dump.array("v", in.v, tokV);
  dump.array("g", in.g, gShape); dump.array("beta", in.beta, tokens); dump.array("u", in.u, heads);
  dump.array("h0", in.h0, states); dump.array("d_o", dof, tokV); dump.array("d_ht", dhtf, states);
  dump.array("ref_dq", rdq, tokK); dump.array("ref_dk", rdk, tokK); dump.array("ref_dv", rdv, tokV);
  dump.array("ref_dg", rdg, gShape); dump.array("ref_dbeta", delta ? rdb : std::vector<double>{}, tokens);
  dump.array("ref_du", excl ? rdu : std::vector<double>{}, heads); dump.array("ref_dh0", rdh0, states);
  if (cs.all_grads) dump.array("dq", get(dq, rdq.size(), true), tokK);
  dump.array("dk", get(dkb, rdk.size(), true), tokK);
  dump.array("dv", get(dvb, rdv.size(), true), tokV);
  if (cs.all_grads && !rdg.empty()) dump.array("dg", get(dg, rdg.size(), false), gShape);
  if (delta) dump.array("dbeta", get(db, rdb.size(), false), tokens);
  if (excl) dump.array("du", get(du, rdu.size(), false), heads);
  if (cs.h0) dump.array("dh0", get(dh0, rdh0.size(), false), states);
  const std::string path = std::string(g_dump_dir) + "/bwd-" + std::to_string(++g_dumps) + ".bin";
  if (dump.write(path)) std::printf("  (draw written to %s)\n", path.c_str());
  else std::printf("  (could not write %s)\n", path.c_str());
}

void runScanBwdCase(DType dt, int B, int T, int D, std::vector<int64_t> cuv) {
  const bool varlen = !cuv.empty();
  const int N = varlen ? int(cuv.size()) - 1 : B;
  const size_t n = size_t(B) * T * D;
  std::vector<float> x(n), g(n), h0(size_t(N) * D), dh(n), dht(size_t(N) * D);
  fillNormal(x);
  fillDrawn(g, logsigmoid);
  fillNormal(h0);
  fillNormal(dh);
  fillNormal(dht);
  auto xb = encode(x, dt);
  auto dhb = encode(dh, dt);
  std::vector<double> rdx(n, 0), rdg(n, 0), rdh0(size_t(N) * D);
  for (int s = 0; s < N; ++s) {
    const int64_t bos = varlen ? cuv[s] : int64_t(s) * T, len = varlen ? cuv[s + 1] - cuv[s] : T;
    for (int c = 0; c < D; ++c) {
      std::vector<double> hp(len + 1);
      hp[0] = h0[size_t(s) * D + c];
      for (int64_t t = 0; t < len; ++t) {
        const size_t i = size_t(bos + t) * D + c;
        hp[t + 1] = std::exp(double(g[i])) * hp[t] + x[i];
      }
      double acc = dht[size_t(s) * D + c];
      for (int64_t t = len - 1; t >= 0; --t) {
        const size_t i = size_t(bos + t) * D + c;
        acc += dh[i];
        rdx[i] = acc;
        const double lam = std::exp(double(g[i]));
        rdg[i] = acc * lam * hp[t];
        acc *= lam;
      }
      rdh0[size_t(s) * D + c] = acc;
    }
  }
  DevBuf xd(xb.data(), xb.size()), gd(g.data(), n * 4), h0d(h0.data(), h0.size() * 4),
      cu(cuv.data(), cuv.size() * 8), dhd(dhb.data(), dhb.size()), dhtd(dht.data(), dht.size() * 4),
      dxd(n * dtypeSize(dt)), dgd(n * 4), dh0d(rdh0.size() * 4);
  dxd.poison(); dgd.poison(); dh0d.poison();
  ScanShape shape;
  shape.batch = B; shape.seq_len = T; shape.channels = D;
  shape.cu_seqlens = varlen ? cu.as<int64_t>() : nullptr; shape.num_seqs = N;
  ScanBackwardArgs a;
  a.fwd.x = xd.p; a.fwd.g = gd.as<float>(); a.fwd.h0 = h0d.as<float>();
  a.d_h = dhd.p; a.d_ht = dhtd.as<float>(); a.d_x = dxd.p; a.d_g = dgd.as<float>(); a.d_h0 = dh0d.as<float>();
  kc::scanBackward(dt, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> raw(dxd.bytes);
  LINAC_CUDA_CHECK(cudaMemcpy(raw.data(), dxd.p, dxd.bytes, cudaMemcpyDeviceToHost));
  const auto dgf = download<float>(dgd, n), dh0f = download<float>(dh0d, rdh0.size());
  char shp[96];
  std::snprintf(shp, sizeof shp, "B%d T%d D%d%s", B, T, D, varlen ? " varlen" : "");
  report("bwd scan hgrn", dt, shp, "dx", relRms(decode(raw, dt, n), rdx));
  report("bwd scan hgrn", dt, shp, "dg", relRms(std::vector<double>(dgf.begin(), dgf.end()), rdg));
  report("bwd scan hgrn", dt, shp, "dh0", relRms(std::vector<double>(dh0f.begin(), dh0f.end()), rdh0));
}
// ---------------------------------------------------------------------------------------------
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

/// Runs f with the environment variable `name` set to `value`, then restores what it was.
template <class F>
double withEnv(const char* name, const char* value, F&& f) {
  const char* before = std::getenv(name);
  const std::string saved = before ? before : "";
  setenv(name, value, 1);
  const double ms = f();
  if (before) setenv(name, saved.c_str(), 1);
  else unsetenv(name);
  return ms;
}

__global__ void spinKernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

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
bool benchRow(const char* name) { return matchesAny(benchRows, name); }

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
}  // namespace

int main(int argc, char** argv) {
  // a line at a time into a pipe too, so a run cut short by a timeout keeps the rows it printed
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bool quick = false, fwd_only = false, bench_only = false, do_bench = true, do_bwd = true, do_fwd = true;
  uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--fwd-only")) { fwd_only = true; do_bwd = false; }
    else if (!std::strcmp(argv[i], "--bench-only")) bench_only = true;
    else if (!std::strcmp(argv[i], "--hopper-bwd")) setenv("LINAC_HOPPER_BWD", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-late")) setenv("LINAC_HOPPER_LATE", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-diag")) setenv("LINAC_HOPPER_DIAG", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-column-inverse")) setenv("LINAC_HOPPER_BLOCK_INVERSE", "0", 1);
    else if (!std::strcmp(argv[i], "--hopper-wide")) setenv("LINAC_HOPPER_WIDE", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-wide-bwd")) setenv("LINAC_HOPPER_WIDE_BWD", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-diag-single")) setenv("LINAC_HOPPER_DIAG_BWD", "single", 1);
    else if (!std::strcmp(argv[i], "--no-hopper-diag-wide")) setenv("LINAC_HOPPER_DIAG_WIDE", "0", 1);
    else if (!std::strcmp(argv[i], "--hopper-overlap")) setenv("LINAC_HOPPER_OVERLAP", "1", 1);
    else if (!std::strcmp(argv[i], "--hopper-fused-reverse")) setenv("LINAC_HOPPER_FUSED_REVERSE", "1", 1);
    else if (!std::strcmp(argv[i], "--env") && i + 1 < argc) {
      const std::string assignment = argv[++i];
      const size_t eq = assignment.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "linac_cuda_lab: --env takes NAME=VALUE, not '%s'\n", assignment.c_str());
        return 2;
      }
      setenv(assignment.substr(0, eq).c_str(), assignment.substr(eq + 1).c_str(), 1);
    } else if (!std::strcmp(argv[i], "--hopper-auto")) {
      for (const char* name : {"LINAC_HOPPER_LATE", "LINAC_HOPPER_OVERLAP", "LINAC_HOPPER_FUSED_REVERSE",
                               "LINAC_HOPPER_PREPARED_SCORES"})
        setenv(name, "auto", 1);
    }
    else if (!std::strcmp(argv[i], "--no-bench")) do_bench = false;
    else if (!std::strcmp(argv[i], "--untimed")) g_untimed = true;
    else if (!std::strcmp(argv[i], "--no-bwd")) do_bwd = false;
    else if (!std::strcmp(argv[i], "--no-fwd")) do_fwd = false;
    else if (!std::strcmp(argv[i], "--bench-rows") && i + 1 < argc) benchRows = argv[++i];
    else if (!std::strcmp(argv[i], "--cases") && i + 1 < argc) caseFilter = argv[++i];
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--dump-failing") && i + 1 < argc) g_dump_dir = argv[++i];
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("linac_cuda_lab: no CUDA device, skipping\n");
    return 77;
  }
  rng.seed(seed);
  g_seed = seed;
  setenv("LINAC_AUTOTUNE_CACHE", "", 0);  // each lab process times its own choices, unless told a file
  cudaDeviceProp prop;
  LINAC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs), seed %llu\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, (unsigned long long)seed);
  try {
    std::printf("%-28s %-5s %-34s %-4s %10s  %s\n", "kind", "dtype", "shape", "out", "rel-RMS", "result");
    const DecayClass decays[] = {DecayClass::None, DecayClass::Fixed, DecayClass::Scalar, DecayClass::Diagonal};
    const UpdateRule updates[] = {UpdateRule::Additive, UpdateRule::Delta};
    const Readout readouts[] = {Readout::Inclusive, Readout::ExclusiveBonus};
    const DType dtypes[] = {DType::BF16, DType::F32, DType::F16};
    if (!bench_only) checkAutotune();
    if (bench_only) {
    } else if (quick) {
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
    } else {
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
    std::printf("\n%s: %d check(s) failed\n", g_fail ? "FAIL" : "ALL PASS", g_fail);
    if (do_bench && do_fwd) bench();
    if (do_bench && do_bwd) benchBackward();
  } catch (const std::exception& e) {
    std::printf("linac_cuda_lab: error: %s\n", e.what());
    return 1;
  }
  return g_fail ? 1 : 0;
}
