#include "generate/generator.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#ifdef LINAC_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <chrono>
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

GenerateResult generate(model::HybridLMImpl& lm, const torch::Tensor& prompt, const GenerateOptions& options) {
  checkSampling(options.sampling);
  if (prompt.dim() != 2 || prompt.size(1) < 1 || prompt.size(0) < 1)
    throw std::invalid_argument("generate: the prompt must be [B, T] token ids with B, T >= 1");
  if (options.maxNew < 1) throw std::invalid_argument("generate: max new tokens must be >= 1");
  torch::NoGradGuard noGrad;
  const int64_t B = prompt.size(0), T = prompt.size(1);
  torch::Device device = prompt.device();
  if (device.is_cuda() && !device.has_index()) device = torch::Device(torch::kCUDA, 0);
  GenerateResult result;
  result.tokens.resize(size_t(B));
  result.capacity = T + options.maxNew;

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
  torch::Tensor next = take(lm.forwardCached(prompt, cache));  // [B, 1]
  synchronize(device);
  result.prefillSeconds = secondsSince(start);
  result.prefillTokens = B * T;

  start = Clock::now();
  for (int64_t produced = 1; produced < options.maxNew && running > 0; ++produced) {
    next = take(lm.forwardCached(next, cache));
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

}  // namespace linac::generate
