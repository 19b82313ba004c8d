#include "generate/sampling.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace linac::generate {

void checkSampling(const SamplingOptions& options) {
  if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature))
    throw std::invalid_argument("sampling: temperature " + std::to_string(options.temperature) +
                                " must be >= 0 (0 is greedy)");
  if (!(options.topP > 0.0 && options.topP <= 1.0))
    throw std::invalid_argument("sampling: top-p " + std::to_string(options.topP) + " must be in (0, 1]");
}

at::Generator makeGenerator(const SamplingOptions& options) {
  return at::make_generator<at::CPUGeneratorImpl>(options.seed);
}

torch::Tensor sampleNext(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator) {
  checkSampling(options);
  torch::Tensor l = logits.detach().to(torch::kCPU, torch::kFloat32);  // [B, V]
  if (options.temperature == 0.0) return l.argmax(-1);                 // [B]
  torch::Tensor probs = torch::softmax(l / options.temperature, -1);  // [B, V]
  if (options.topP < 1.0) {
    auto [sorted, order] = probs.sort(-1, /*descending=*/true);  // [B, V] each
    // A token stays when the tokens more likely than it have not yet reached top-p; the most
    // likely token always stays.
    torch::Tensor before = sorted.cumsum(-1) - sorted;  // [B, V]
    torch::Tensor kept = sorted.masked_fill(before >= options.topP, 0.0);
    probs = torch::zeros_like(probs).scatter(-1, order, kept);
  }
  return torch::multinomial(probs, 1, /*replacement=*/false, generator).squeeze(-1);  // [B]
}

}  // namespace linac::generate
