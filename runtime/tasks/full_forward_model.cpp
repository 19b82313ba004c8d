#include "tasks/language_model.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace linac::tasks {

double ContinuationScore::total() const { return std::accumulate(logProbs.begin(), logProbs.end(), 0.0); }

bool ContinuationScore::allGreedy() const {
  return std::all_of(greedy.begin(), greedy.end(), [](bool g) { return g; });
}

namespace {

constexpr int64_t kPadId = 0;  // right padding: a causal model never attends to it

class FullForwardModel final : public LanguageModel {
 public:
  FullForwardModel(eval::Forward forward, torch::Device device, FullForwardOptions options)
      : forward_(std::move(forward)), device_(device), options_(options) {
    if (options_.batch < 1) throw std::invalid_argument("full-forward model: batch must be >= 1");
  }

  std::vector<TokenIds> generate(const std::vector<TokenIds>& prompts, int64_t maxNew,
                                 std::optional<int64_t> stop) override {
    torch::NoGradGuard noGrad;
    std::vector<TokenIds> sequences = prompts, generated(prompts.size());
    std::vector<size_t> active;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].empty()) throw std::invalid_argument("generate: prompt " + std::to_string(i) + " is empty");
      if (maxNew > 0) active.push_back(i);
    }
    while (!active.empty()) {
      std::vector<size_t> still;
      for (size_t start = 0; start < active.size();) {
        const size_t count = groupSize(active, start, [&](size_t i) { return sequences[i].size(); });
        std::vector<const TokenIds*> rows;
        for (size_t j = start; j < start + count; ++j) rows.push_back(&sequences[active[j]]);
        const torch::Tensor logits = runPadded(rows);  // [b, L, V]
        std::vector<int64_t> last;
        for (const TokenIds* row : rows) last.push_back(int64_t(row->size()) - 1);
        const auto onDevice = torch::TensorOptions().dtype(torch::kInt64).device(logits.device());
        const torch::Tensor rowsIndex = torch::arange(int64_t(rows.size()), onDevice);
        const torch::Tensor next =
            logits.index({rowsIndex, torch::tensor(last).to(logits.device())}).argmax(-1).to(torch::kCPU);  // [b]
        for (size_t j = 0; j < count; ++j) {
          const size_t i = active[start + j];
          const int64_t id = next[int64_t(j)].item<int64_t>();
          if (stop && id == *stop) continue;
          sequences[i].push_back(id);
          generated[i].push_back(id);
          if (int64_t(generated[i].size()) < maxNew) still.push_back(i);
        }
        start += count;
      }
      active = std::move(still);
    }
    return generated;
  }

  std::vector<ContinuationScore> score(const std::vector<ContinuationRequest>& requests) override {
    torch::NoGradGuard noGrad;
    std::vector<TokenIds> inputs(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const ContinuationRequest& r = requests[i];
      if (r.context.empty()) throw std::invalid_argument("score: request " + std::to_string(i) + " has no context");
      if (r.continuation.empty())
        throw std::invalid_argument("score: request " + std::to_string(i) + " has no continuation");
      TokenIds& in = inputs[i];
      in = r.context;
      in.insert(in.end(), r.continuation.begin(), r.continuation.end() - 1);
      if (options_.maxLength > 0 && int64_t(in.size()) > options_.maxLength) {
        if (int64_t(r.continuation.size()) > options_.maxLength)
          throw std::invalid_argument("score: a continuation of " + std::to_string(r.continuation.size()) +
                                      " tokens is longer than the model's maximum length " +
                                      std::to_string(options_.maxLength));
        in.erase(in.begin(), in.end() - options_.maxLength);
      }
    }
    std::vector<size_t> order(requests.size());
    std::iota(order.begin(), order.end(), size_t{0});
    // Longest first: neighbours in a batch have similar lengths, so little of a forward is padding.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return inputs[a].size() > inputs[b].size(); });
    std::vector<ContinuationScore> scores(requests.size());
    for (size_t start = 0; start < order.size();) {
      const size_t count = groupSize(order, start, [&](size_t i) { return inputs[i].size(); });
      std::vector<const TokenIds*> rows;
      for (size_t j = start; j < start + count; ++j) rows.push_back(&inputs[order[j]]);
      const torch::Tensor logits = runPadded(rows);
      for (size_t j = 0; j < count; ++j) {
        const size_t i = order[start + j];
        const TokenIds& cont = requests[i].continuation;
        const int64_t n = int64_t(inputs[i].size()), c = int64_t(cont.size());
        const torch::Tensor rowLogits = logits[int64_t(j)].slice(0, n - c, n).to(torch::kCPU, torch::kFloat32);
        const torch::Tensor logProbs = torch::log_softmax(rowLogits, -1);  // [c, V]
        const torch::Tensor best = rowLogits.argmax(-1);
        ContinuationScore& s = scores[i];
        for (int64_t t = 0; t < c; ++t) {
          s.logProbs.push_back(logProbs[t][cont[size_t(t)]].item<double>());
          s.greedy.push_back(best[t].item<int64_t>() == cont[size_t(t)]);
        }
      }
      start += count;
    }
    return scores;
  }

 private:
  /// How many of order[start...] go into one forward: at most options_.batch, and few enough
  /// that batch x longest x vocabulary stays under maxLogitElements (at least one).
  template <typename Length>
  size_t groupSize(const std::vector<size_t>& order, size_t start, Length length) const {
    size_t count = 0;
    size_t longest = 0;
    while (start + count < order.size() && int64_t(count) < options_.batch) {
      const size_t len = std::max(longest, length(order[start + count]));
      if (count > 0 && vocab_ > 0 && int64_t(count + 1) * int64_t(len) * vocab_ > options_.maxLogitElements) break;
      longest = len;
      ++count;
      if (vocab_ == 0) break;  // the first forward learns the vocabulary
    }
    return count;
  }

  torch::Tensor runPadded(const std::vector<const TokenIds*>& rows) {
    size_t longest = 0;
    for (const TokenIds* r : rows) longest = std::max(longest, r->size());
    torch::Tensor tokens = torch::full({int64_t(rows.size()), int64_t(longest)}, kPadId, torch::kInt64);
    auto acc = tokens.accessor<int64_t, 2>();
    for (size_t b = 0; b < rows.size(); ++b)
      for (size_t t = 0; t < rows[b]->size(); ++t) acc[int64_t(b)][int64_t(t)] = (*rows[b])[t];
    torch::Tensor logits = forward_(tokens.to(device_));
    if (logits.dim() != 3 || logits.size(0) != tokens.size(0) || logits.size(1) != tokens.size(1))
      throw std::runtime_error("full-forward model: the forward returned logits of the wrong shape");
    vocab_ = logits.size(2);
    return logits;
  }

  eval::Forward forward_;
  torch::Device device_;
  FullForwardOptions options_;
  int64_t vocab_ = 0;
};

}  // namespace

std::unique_ptr<LanguageModel> makeFullForwardModel(eval::Forward forward, torch::Device device,
                                                    FullForwardOptions options) {
  return std::make_unique<FullForwardModel>(std::move(forward), device, options);
}

}  // namespace linac::tasks
