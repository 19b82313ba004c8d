// The kernel lab's shared pieces (linac_cuda_lab; lab.cu says what it checks): the one random
// stream every case draws from, dtype encoding, device buffers, the rel-RMS gate and its report
// line, a case's fields and inputs, the float64 token recurrence, the --cases filter, and the
// entry points of the lab's other files. Definitions in lab_common.cu unless a template.
#pragma once

#include "cuda_check.h"
#include "cuda_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace lab {

using namespace linac::kernels;
namespace kc = linac::kernels::cuda;

extern std::mt19937_64 rng;  // the random stream (main seeds it with --seed)
double normal();             // z ~ N(0, 1) from rng
double logsigmoid(double x);

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
void fillNormal(std::vector<float>& x, double scale = 1.0);

const char* dtypeName(DType d);
size_t dtypeSize(DType d);
const char* decayName(DecayClass d);

/// Rounds to dtype (what the device sees) and returns the encoded bytes.
std::vector<uint8_t> encode(std::vector<float>& x, DType d);
std::vector<double> decode(const std::vector<uint8_t>& b, DType d, size_t n);

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
double relRms(const std::vector<double>& x, const std::vector<double>& ref);

extern int g_fail;  // failed checks so far (main's exit code: 1 when any)
extern uint64_t g_seed;  // the run's --seed (in --dump-failing's files)
extern const char* g_dump_dir;  // --dump-failing DIR: each failing backward case's draw (lab_dump.h)
extern int g_dumps;  // --dump-failing's files written so far (bwd-<n>.bin)
/// One line of the table: PASS where err is below the dtype's gate (1e-5 fp32, 5e-3 16-bit).
void report(const std::string& kind, DType d, const std::string& shape, const char* what, double err);

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

std::string kindName(const RecurrenceKind& k);

struct Inputs {
  std::vector<float> q, k, v, g, beta, u, h0;
  std::vector<uint8_t> qb, kb, vb;
};

Inputs makeInputs(const RecurrenceKind& kind, DType dt, int B, int T, int H, int dk, int dv, int N,
                  double gmul, double gclamp, bool with_h0, double wsigma = 0.0);

/// float64 reference: one token of recurrence.h for one (sequence, head). S [dk x dv] row-major.
void refToken(const RecurrenceKind& kind, int dk, int dv, const float* q, const float* k,
              const float* v, const double* lam, double beta, const float* u, double scale,
              std::vector<double>& S, double* o);
void decayOf(const RecurrenceKind& kind, const Inputs& in, size_t tokhead, int h, int dk, double* lam);

/// Whether `name` contains one of the comma-separated parts of `filter` (null: every name).
bool matchesAny(const char* filter, const std::string& name);

/// --cases TEXT: only the chunk cases whose line ("fwd additive-diag bf16 B2 T150 ...", "bwd ...",
/// the kind, dtype and shape columns joined by spaces) contains one of TEXT's comma-separated parts,
/// e.g. a sanitizer's run over one case. The skipped cases draw nothing, so the kept ones see other
/// draws than in a full run at the same --seed.
extern const char* caseFilter;

/// The shape column of a chunk case's lines.
std::string caseShape(const Case& cs, bool backward);
bool caseSelected(const std::string& kind, DType dt, const std::string& shape);

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

// ---------------------------------------------------------------------------------------------
// The lab's checks and timings, by file.
// lab_forward.cu
void runChunkCase(const Case& cs);
void runStepCase(const RecurrenceKind& kind, DType dt, int B, int H, int dk, int dv);
void runScanCase(DType dt, int B, int T, int D, std::vector<int64_t> cuv);
// lab_backward.cu
void runBwdCase(const Case& cs);
void runScanBwdCase(DType dt, int B, int T, int D, std::vector<int64_t> cuv);
// lab_bench.cu
extern bool g_untimed;         // --untimed: checkAutotune does not ask which candidate won
extern const char* benchRows;  // --bench-rows TEXT: the timing rows to run (null: all)
void checkAutotune();
void bench();
void benchBackward();
// lab_cases.cu
void runQuickCases(bool do_bwd);
void runFullCases(bool fwd_only, bool do_bwd);

}  // namespace lab
