// Generation with state caches: the prompt runs once through the chunk kernels (prefill), which
// leave each linear layer's final state, conv and token-shift inputs and each attention layer's
// keys and values in the model's cache (model/cache.h); then every new token is one decode step
// (the recurrent-step kernels, attention over the cached keys), for a batch of sequences at once.
// Prefill and decode are timed separately; on CUDA the caching allocator's bytes are recorded
// around the cache's allocation and at the peak.
#pragma once

#include "generate/sampling.h"
#include "model/cache.h"
#include "model/model.h"

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace linac::generate {

struct GenerateOptions {
  int64_t maxNew = 64;          // new tokens per sequence at most
  SamplingOptions sampling;
  std::optional<int64_t> stop;  // a sequence ends after producing this id (which is not returned)
  bool keepLogits = false;      // return the logits of every position run (tests)
};

/// The CUDA caching allocator's view (bytes allocated through it, on the model's device).
struct DeviceMemory {
  int64_t before = 0;  // allocated when generate() started (weights, anything else live)
  int64_t cache = 0;   // allocated by making the cache
  int64_t peak = 0;    // the most allocated at once during generate()
};

struct GenerateResult {
  std::vector<std::vector<int64_t>> tokens;  // per sequence, the new ids (up to its stop id)
  /// With keepLogits: [B, T + steps, vocab] float32 on the CPU, the logits of the prompt's
  /// positions (prefill) and of each decoded token (one per step), in order.
  torch::Tensor logits;
  int64_t prefillTokens = 0;  // B x prompt length
  int64_t decodeTokens = 0;   // B x decode steps run
  double prefillSeconds = 0.0, decodeSeconds = 0.0;
  model::CacheBytes cacheBytes;        // what the cache's tensors hold
  int64_t capacity = 0;                // positions the cache was made for (prompt + maxNew)
  std::optional<DeviceMemory> device;  // CUDA only

  double prefillTokensPerSecond() const;
  double decodeTokensPerSecond() const;
};

/// Continues each row of `prompt` [B, T] (int64, on the model's device, T >= 1; every row the
/// same length: the overload below takes prompts of different lengths) by up to options.maxNew
/// tokens. Runs without gradients; the model should be in eval mode. Throws std::invalid_argument
/// for an empty prompt, maxNew < 1 or bad sampling options.
GenerateResult generate(model::HybridLMImpl& lm, const torch::Tensor& prompt, const GenerateOptions& options);

/// Continues each of `prompts` (token ids, lengths may differ, each >= 1) by up to maxNew tokens
/// in one batch on `device`: the rows of each prompt length are prefilled together through a view
/// of the cache (ModelCache::rows), then every row decodes at its own position. Each row's tokens
/// are those it would get alone. With keepLogits, logits is [B, maxNew or fewer, vocab]: the
/// logits that chose each new token (the prompt's last position, then each step), in the order
/// of `prompts`.
GenerateResult generate(model::HybridLMImpl& lm, const std::vector<std::vector<int64_t>>& prompts,
                        const torch::Device& device, const GenerateOptions& options);

}  // namespace linac::generate
