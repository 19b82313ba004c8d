#include "tasks/cached_model.h"

#include "generate/generator.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace linac::tasks {
namespace {

class CachedModel final : public LanguageModel {
 public:
  CachedModel(model::HybridLMImpl& lm, torch::Device device, FullForwardOptions options)
      : lm_(lm), device_(device), batch_(options.batch),
        scorer_(makeFullForwardModel([&lm](const torch::Tensor& tokens) { return lm.forward(tokens); }, device,
                                     options)) {
    if (batch_ < 1) throw std::invalid_argument("cached model: batch must be >= 1");
  }

  std::vector<TokenIds> generate(const std::vector<TokenIds>& prompts, int64_t maxNew,
                                 std::optional<int64_t> stop) override {
    std::map<size_t, std::vector<size_t>> byLength;  // prompt length -> prompt indices, in order
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].empty()) throw std::invalid_argument("generate: prompt " + std::to_string(i) + " is empty");
      byLength[prompts[i].size()].push_back(i);
    }
    std::vector<TokenIds> generated(prompts.size());
    if (maxNew < 1) return generated;
    generate::GenerateOptions options;
    options.maxNew = maxNew;
    options.stop = stop;  // greedy: the default sampling
    for (const auto& [length, indices] : byLength) {
      for (size_t start = 0; start < indices.size(); start += size_t(batch_)) {
        const size_t count = std::min(indices.size() - start, size_t(batch_));
        torch::Tensor prompt = torch::empty({int64_t(count), int64_t(length)}, torch::kInt64);  // [b, L]
        auto acc = prompt.accessor<int64_t, 2>();
        for (size_t j = 0; j < count; ++j)
          for (size_t t = 0; t < length; ++t) acc[int64_t(j)][int64_t(t)] = prompts[indices[start + j]][t];
        generate::GenerateResult result = generate::generate(lm_, prompt.to(device_), options);
        for (size_t j = 0; j < count; ++j) generated[indices[start + j]] = std::move(result.tokens[j]);
      }
    }
    return generated;
  }

  std::vector<ContinuationScore> score(const std::vector<ContinuationRequest>& requests) override {
    return scorer_->score(requests);
  }

 private:
  model::HybridLMImpl& lm_;
  torch::Device device_;
  int64_t batch_;
  std::unique_ptr<LanguageModel> scorer_;
};

}  // namespace

std::unique_ptr<LanguageModel> makeCachedModel(model::HybridLMImpl& lm, torch::Device device,
                                               FullForwardOptions options) {
  return std::make_unique<CachedModel>(lm, device, options);
}

}  // namespace linac::tasks
