#include "tasks/cached_model.h"

#include "generate/generator.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>
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
    for (size_t i = 0; i < prompts.size(); ++i)
      if (prompts[i].empty()) throw std::invalid_argument("generate: prompt " + std::to_string(i) + " is empty");
    std::vector<TokenIds> generated(prompts.size());
    if (maxNew < 1) return generated;
    generate::GenerateOptions options;
    options.maxNew = maxNew;
    options.stop = stop;  // greedy: the default sampling
    // Batches of similar lengths (the cache is sized by a batch's longest prompt); each row
    // decodes at its own position.
    std::vector<size_t> order(prompts.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prompts[a].size() < prompts[b].size(); });
    for (size_t start = 0; start < order.size(); start += size_t(batch_)) {
      const size_t count = std::min(order.size() - start, size_t(batch_));
      std::vector<TokenIds> batch;
      for (size_t j = 0; j < count; ++j) batch.push_back(prompts[order[start + j]]);
      generate::GenerateResult result = generate::generate(lm_, batch, device_, options);
      for (size_t j = 0; j < count; ++j) generated[order[start + j]] = std::move(result.tokens[j]);
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
