// What the evaluation tasks need from a model, in one small interface: greedy generation (RULER)
// and per-token log-likelihoods of a continuation (zero-shot multiple choice, LAMBADA). Tasks see
// only this interface, so a faster engine (a cached prefill + decode-step generator) replaces
// makeFullForwardModel in one place.
#pragma once

#include "eval/eval.h"

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace linac::tasks {

using TokenIds = std::vector<int64_t>;

/// The log-probability of each continuation token given everything before it, and whether each
/// token was the model's argmax there.
struct ContinuationScore {
  std::vector<double> logProbs;
  std::vector<bool> greedy;
  double total() const;        // summed log-likelihood
  bool allGreedy() const;      // greedy decoding would have produced the continuation
};

/// A (context, continuation) pair; the context must hold at least one token.
struct ContinuationRequest {
  TokenIds context;
  TokenIds continuation;
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  /// Greedy (argmax) continuation of each prompt: at most maxNew ids each, ending early after
  /// `stop` is produced (the stop id itself is not returned). Prompts must be non-empty.
  virtual std::vector<TokenIds> generate(const std::vector<TokenIds>& prompts, int64_t maxNew,
                                         std::optional<int64_t> stop) = 0;
  /// The score of each request's continuation. A context + continuation longer than the model's
  /// maximum length is truncated from the left, as lm-evaluation-harness does.
  virtual std::vector<ContinuationScore> score(const std::vector<ContinuationRequest>& requests) = 0;
};

struct FullForwardOptions {
  int64_t batch = 8;            // sequences per forward at most
  /// Cap on batch x length x vocabulary of one forward's logits (fp32 elements), so a large
  /// vocabulary at a long context runs in smaller batches instead of exhausting memory.
  int64_t maxLogitElements = int64_t{1} << 28;  // 1 GiB of fp32 logits
  int64_t maxLength = 0;        // score(): longest input sequence; 0 = no limit
};

/// The interface over a plain forward (tokens [B, T] -> logits [B, T, V]): generation re-runs the
/// whole sequence for each new token (correct for any causal model, cost O(maxNew) forwards).
/// Sequences of different lengths share a forward right-padded, which a causal model cannot see.
std::unique_ptr<LanguageModel> makeFullForwardModel(eval::Forward forward, torch::Device device,
                                                    FullForwardOptions options = {});

}  // namespace linac::tasks
