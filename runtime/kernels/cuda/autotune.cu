// The kernels' measured choices (autotune.h) over the on-disk cache (common/autotune_cache.h).
#include "autotune.h"

#include "../common/autotune_cache.h"
#include "cuda_check.h"

#ifndef LINAC_KERNELS_BUILD
#include "build_info.h"  // LINAC_GIT_COMMIT, written at build time (cmake/BuildInfo.cmake)
#define LINAC_KERNELS_BUILD LINAC_GIT_COMMIT
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace linac::kernels::cuda {
namespace {

constexpr int kTimedRuns = 5;  // per candidate; the median is kept

/// The current device's name and SM count ("NVIDIA H200 (132 SMs)"): an H100 PCIe and an H100
/// SXM differ in SMs, and the choice with them.
std::string gpuName() {
  static std::mutex mutex;
  static std::map<int, std::string> names;
  int device = 0;
  LINAC_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = names.find(device);
  if (it == names.end()) {
    cudaDeviceProp prop{};
    LINAC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    it = names.emplace(device, tuneField(std::string(prop.name) + " (" +
                                         std::to_string(prop.multiProcessorCount) + " SMs)"))
             .first;
  }
  return it->second;
}

/// `point` with the candidates' names, "delta_backward.reverse[staged|fused]": a different set of
/// candidates (an opt-in path added) is a different choice.
std::string pointWithCandidates(const std::string& point, const std::vector<TuneCandidate>& candidates) {
  std::string text = point + "[";
  for (size_t i = 0; i < candidates.size(); ++i) text += (i ? "|" : "") + candidates[i].name;
  return tuneField(text + "]");
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  LINAC_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

/// One timed run of `launch` on `stream`, in milliseconds.
float timeOnce(const std::function<void()>& launch, cudaEvent_t start, cudaEvent_t stop,
               cudaStream_t stream) {
  LINAC_CUDA_CHECK(cudaEventRecord(start, stream));
  launch();
  LINAC_CUDA_CHECK(cudaEventRecord(stop, stream));
  LINAC_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  LINAC_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms;
}

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    LINAC_CUDA_CHECK(cudaEventCreate(&start));
    LINAC_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

/// Every candidate's median time, runs interleaved so that a clock change moves all of them alike.
/// A candidate's exception propagates as the call's own would (an out-of-memory error from the
/// host's allocator keeps its type, so `linac train --find-batch` still bisects past it).
std::vector<double> timeCandidates(const std::vector<TuneCandidate>& candidates, cudaStream_t stream) {
  const Events events;
  std::vector<std::vector<float>> runs(candidates.size());
  for (int run = -1; run < kTimedRuns; ++run)  // run -1: the warm-up
    for (size_t i = 0; i < candidates.size(); ++i) {
      const float ms = timeOnce(candidates[i].launch, events.start, events.stop, stream);
      if (run >= 0) runs[i].push_back(ms);
    }
  std::vector<double> medians(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    std::sort(runs[i].begin(), runs[i].end());
    medians[i] = runs[i][runs[i].size() / 2];
  }
  return medians;
}

std::recursive_mutex& cacheMutex() {  // recursive: a candidate may reach another choice point
  static std::recursive_mutex mutex;
  return mutex;
}

AutotuneCache& processCache() {
  static AutotuneCache cache(AutotuneCache::defaultPath());
  return cache;
}

}  // namespace

bool autotuneEnabled() {
  const char* value = std::getenv("LINAC_AUTOTUNE");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

size_t chooseCandidate(const std::string& point, const std::string& shape,
                       const std::vector<TuneCandidate>& candidates, size_t fallback,
                       cudaStream_t stream) {
  LINAC_REQUIRE(fallback < candidates.size(), "chooseCandidate: the fallback is not a candidate");
  if (candidates.size() == 1) return 0;
  const TuneKey key{tuneField(LINAC_KERNELS_BUILD), gpuName(), pointWithCandidates(point, candidates),
                    tuneField(shape)};
  std::lock_guard<std::recursive_mutex> lock(cacheMutex());
  AutotuneCache& cache = processCache();
  if (const auto recorded = cache.find(key)) {
    for (size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].name == *recorded) return i;
  }
  if (!autotuneEnabled() || capturing(stream)) return fallback;

  const std::string what = point + " [" + shape + "]";
  const std::vector<double> ms = timeCandidates(candidates, stream);
  const size_t best = size_t(std::min_element(ms.begin(), ms.end()) - ms.begin());
  TuneResult result{candidates[best].name, {}};
  std::string report = "linac: autotune " + what + ":";
  for (size_t i = 0; i < candidates.size(); ++i) {
    result.times_ms.emplace_back(candidates[i].name, ms[i]);
    char line[96];
    std::snprintf(line, sizeof line, "%s %s %.3f ms", i ? "," : "", candidates[i].name.c_str(), ms[i]);
    report += line;
  }
  report += " -> " + candidates[best].name;
  if (!cache.record(key, result)) report += " (not saved: cannot write " + cache.path() + ")";
  std::fprintf(stderr, "%s\n", report.c_str());
  return best;
}

std::string recurrenceShapeClass(const RecurrenceKind& kind, DType dtype,
                                 const RecurrenceShape& shape, int64_t num_seqs) {
  auto pow2 = [](int64_t n) {
    int64_t p = 1;
    while (p < n) p *= 2;
    return p;
  };
  static const char* const kDecay[] = {"none", "fixed", "scalar", "diagonal"};
  const char* type = dtype == DType::BF16 ? "bf16" : dtype == DType::F16 ? "fp16" : "fp32";
  const int64_t seqs = std::max<int64_t>(num_seqs, 1);
  std::string text = std::string(type) + " " + kDecay[int(kind.decay)] +
                     (kind.update == UpdateRule::Delta ? " delta" : " additive") +
                     (kind.readout == Readout::ExclusiveBonus ? " bonus" : "") +
                     " dk" + std::to_string(shape.key_dim) + " dv" + std::to_string(shape.value_dim) +
                     " nh" + std::to_string(pow2(seqs * shape.heads)) +
                     " t" + std::to_string(pow2(shape.batch * shape.seq_len / seqs));
  if (shape.cu_seqlens != nullptr) text += " varlen";
  return text;
}

}  // namespace linac::kernels::cuda
