#include "generate/generator.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#ifdef LINAC_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <string>

namespace linac::generate {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Waits for the device's queued work, so that a clock read after it times that work.
void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

#ifdef LINAC_HAVE_CUDA
using c10::CachingAllocator::StatType;
int64_t allocatedBytes(const torch::Device& device, bool peak) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto& stat = stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)];
  return peak ? stat.peak : stat.current;
}
#endif

}  // namespace

double GenerateResult::prefillTokensPerSecond() const {
  return prefillSeconds > 0.0 ? double(prefillTokens) / prefillSeconds : 0.0;
}

double GenerateResult::decodeTokensPerSecond() const {
  return decodeSeconds > 0.0 ? double(decodeTokens) / decodeSeconds : 0.0;
}

namespace {

/// The engine once the prompts are known: makes the cache (B rows, `capacity` positions), runs
/// `prefill` on it (it returns logits [B, t, vocab] whose last position picks each row's first new
/// token), then the decode steps. Fills everything in the result but prefillTokens.
template <class Prefill>
GenerateResult run(model::HybridLMImpl& lm, int64_t B, int64_t capacity, torch::Device device,
                   const GenerateOptions& options, Prefill&& prefill) {
  torch::NoGradGuard noGrad;
  if (device.is_cuda() && !device.has_index()) device = torch::Device(torch::kCUDA, 0);
  GenerateResult result;
  result.tokens.resize(size_t(B));
  result.capacity = capacity;

#ifdef LINAC_HAVE_CUDA
  if (device.is_cuda()) {
    synchronize(device);
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    result.device = DeviceMemory{allocatedBytes(device, false), 0, 0};
  }
#endif
  model::ModelCache cache = lm.makeCache(B, result.capacity);
#ifdef LINAC_HAVE_CUDA
  if (result.device) result.device->cache = allocatedBytes(device, false) - result.device->before;
#endif
  result.cacheBytes = cache.bytes();

  at::Generator generator = makeGenerator(options.sampling);
  std::vector<torch::Tensor> kept;  // [B, t, vocab] per call, with keepLogits
  std::vector<bool> done(size_t(B), false);
  int64_t running = B;
  // One new id per row from the last position's logits [B, vocab]; rows past their stop id
  // keep running (the batch stays whole) but add nothing.
  auto take = [&](const torch::Tensor& logits) {
    if (options.keepLogits) kept.push_back(logits.to(torch::kCPU, torch::kFloat32));
    torch::Tensor next = sampleNext(logits.select(1, logits.size(1) - 1), options.sampling, generator);  // [B]
    auto ids = next.accessor<int64_t, 1>();
    for (int64_t b = 0; b < B; ++b) {
      if (done[size_t(b)]) continue;
      if (options.stop && ids[b] == *options.stop) {
        done[size_t(b)] = true, --running;
        continue;
      }
      result.tokens[size_t(b)].push_back(ids[b]);
    }
    return next.to(device).view({B, 1});
  };

  synchronize(device);
  Clock::time_point start = Clock::now();
  torch::Tensor next = take(prefill(cache));  // [B, 1]
  synchronize(device);
  result.prefillSeconds = secondsSince(start);

  start = Clock::now();
  for (int64_t produced = 1; produced < options.maxNew && running > 0; ++produced) {
    next = take(lm.forwardCached(next, cache, !options.keepLogits));
    result.decodeTokens += B;
  }
  synchronize(device);
  result.decodeSeconds = secondsSince(start);

#ifdef LINAC_HAVE_CUDA
  if (result.device) result.device->peak = allocatedBytes(device, true);
#endif
  if (options.keepLogits) result.logits = torch::cat(kept, 1);
  return result;
}

}  // namespace

GenerateResult generate(model::HybridLMImpl& lm, const torch::Tensor& prompt, const GenerateOptions& options) {
  checkSampling(options.sampling);
  if (prompt.dim() != 2 || prompt.size(1) < 1 || prompt.size(0) < 1)
    throw std::invalid_argument("generate: the prompt must be [B, T] token ids with B, T >= 1");
  if (options.maxNew < 1) throw std::invalid_argument("generate: max new tokens must be >= 1");
  const int64_t B = prompt.size(0), T = prompt.size(1);
  GenerateResult result = run(lm, B, T + options.maxNew, prompt.device(), options,
                              [&](model::ModelCache& cache) { return lm.forwardCached(prompt, cache, !options.keepLogits); });
  result.prefillTokens = B * T;
  return result;
}

GenerateResult generate(model::HybridLMImpl& lm, const std::vector<std::vector<int64_t>>& prompts,
                        const torch::Device& device, const GenerateOptions& options) {
  checkSampling(options.sampling);
  if (prompts.empty()) throw std::invalid_argument("generate: no prompts");
  if (options.maxNew < 1) throw std::invalid_argument("generate: max new tokens must be >= 1");
  const int64_t B = int64_t(prompts.size());
  int64_t longest = 0, tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw std::invalid_argument("generate: prompt " + std::to_string(i) + " is empty");
    longest = std::max(longest, int64_t(prompts[i].size()));
    tokens += int64_t(prompts[i].size());
  }
  // Rows of one length next to each other, so each length is one prefill through a view of its rows.
  std::vector<size_t> order(prompts.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prompts[a].size() < prompts[b].size(); });
  auto prefill = [&](model::ModelCache& cache) {
    std::vector<torch::Tensor> last(prompts.size());  // [1, vocab] per row, in row order
    torch::Tensor lengths = torch::empty({B}, torch::kInt64);
    for (int64_t start = 0; start < B;) {
      const size_t length = prompts[order[size_t(start)]].size();
      int64_t end = start + 1;
      while (end < B && prompts[order[size_t(end)]].size() == length) ++end;
      torch::Tensor ids = torch::empty({end - start, int64_t(length)}, torch::kInt64);  // [rows, length]
      for (int64_t r = start; r < end; ++r) {
        ids[r - start].copy_(torch::tensor(prompts[order[size_t(r)]], torch::kInt64));
        lengths[r] = int64_t(length);
      }
      // One length for every row: the cache itself (its decode steps then need no row lengths).
      const bool whole = start == 0 && end == B;
      model::ModelCache rows = whole ? model::ModelCache() : cache.rows(start, end - start);
      torch::Tensor logits = lm.forwardCached(ids.to(device), whole ? cache : rows, /*lastOnly=*/true);  // [rows, 1, vocab]
      if (whole) return logits;
      for (int64_t r = start; r < end; ++r) last[size_t(r)] = logits[r - start];  // [1, vocab]
      start = end;
    }
    cache.setRowLengths(lengths.to(device));
    return torch::cat(last, 0).unsqueeze(1);  // [B, 1, vocab]
  };
  GenerateResult result = run(lm, B, longest + options.maxNew, device, options, prefill);
  result.prefillTokens = tokens;
  // The rows ran in `order`: back to the order of `prompts`.
  std::vector<std::vector<int64_t>> tokensByPrompt(order.size());
  torch::Tensor inverse = torch::empty({B}, torch::kInt64);
  for (size_t r = 0; r < order.size(); ++r) {
    tokensByPrompt[order[r]] = std::move(result.tokens[r]);
    inverse[int64_t(order[r])] = int64_t(r);
  }
  result.tokens = std::move(tokensByPrompt);
  if (options.keepLogits) result.logits = result.logits.index_select(0, inverse);
  return result;
}

}  // namespace linac::generate
