// Evaluation of a trained language model (DESIGN.md section 5): held-out perplexity and MQAR
// (multi-query associative recall) accuracy at several numbers of key-value pairs.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

namespace linac::eval {

/// tokens [B, T] int64 -> logits [B, T, V].
using Forward = std::function<torch::Tensor(const torch::Tensor&)>;

struct PerplexityResult {
  double loss = 0.0;  // mean per-token cross entropy, nats
  double ppl = 0.0;
  int64_t tokens = 0;
};

/// `windows` [N, seqLen + 1] int64 (inputs [:, :-1], targets [:, 1:]), run in micro-batches of
/// `batch` without gradients on `device`.
PerplexityResult perplexity(const Forward& forward, const torch::Tensor& windows, int64_t batch,
                            const torch::Device& device);

struct MqarResult {
  int64_t pairs = 0;
  double accuracy = 0.0;  // fraction of queried values predicted exactly (argmax)
  int64_t queries = 0;
};

/// MQAR accuracy for each entry of `pairs` on `examples` fresh sequences of `seqLen` tokens over
/// the model's vocabulary (data::makeMqar), seeded.
std::vector<MqarResult> mqar(const Forward& forward, const std::vector<int64_t>& pairs, int64_t seqLen,
                             int64_t vocab, int64_t examples, uint64_t seed, const torch::Device& device);

/// Entropy of the empirical unigram distribution of `tokens` (nats): the loss of a model that
/// ignores context, the baseline a trained model must beat.
double unigramEntropy(const std::vector<int64_t>& tokens, int64_t vocab);

}  // namespace linac::eval
