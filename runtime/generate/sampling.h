// Choosing the next token from a model's logits: greedy (argmax), or a draw from the softmax at a
// temperature, optionally restricted to the top-p nucleus (Holtzman et al. 2020), from a seeded
// CPU generator so that a seed gives the same tokens on every device.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>

namespace linac::generate {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy
  double topP = 1.0;         // (0, 1]: keep the fewest most likely tokens whose probabilities reach topP
  uint64_t seed = 0;
};

/// Throws std::invalid_argument naming the option that is out of range.
void checkSampling(const SamplingOptions& options);

/// A CPU generator seeded with options.seed.
at::Generator makeGenerator(const SamplingOptions& options);

/// logits [B, V] (any float dtype, any device) -> next ids [B] int64 on the CPU.
torch::Tensor sampleNext(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

}  // namespace linac::generate
