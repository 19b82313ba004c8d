#include "eval/eval.h"

#include "data/data.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

namespace linac::eval {
namespace {

constexpr int64_t kIgnore = -100;  // targets the loss skips (MQAR positions nothing is asked at)
constexpr int64_t kMqarBatch = 16;

}  // namespace

PerplexityResult perplexity(const Forward& forward, const torch::Tensor& windows, int64_t batch,
                            const torch::Device& device) {
  if (!windows.defined() || windows.size(0) == 0)
    throw std::invalid_argument("perplexity: no held-out windows");
  torch::NoGradGuard noGrad;
  double total = 0.0;
  int64_t count = 0;
  for (int64_t i = 0; i < windows.size(0); i += batch) {
    torch::Tensor w = windows.slice(0, i, std::min(i + batch, windows.size(0))).to(device);  // [b, T+1]
    torch::Tensor logits = forward(w.slice(1, 0, -1)).to(torch::kFloat32);                  // [b, T, V]
    torch::Tensor targets = w.slice(1, 1);
    total += torch::nn::functional::cross_entropy(
                 logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                 torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                 .item<double>();
    count += targets.numel();
  }
  PerplexityResult r;
  r.tokens = count;
  r.loss = total / double(count);
  r.ppl = std::exp(r.loss);
  return r;
}

std::vector<MqarResult> mqar(const Forward& forward, const std::vector<int64_t>& pairs, int64_t seqLen,
                             int64_t vocab, int64_t examples, uint64_t seed, const torch::Device& device) {
  torch::NoGradGuard noGrad;
  std::vector<MqarResult> out;
  for (int64_t p : pairs) {
    MqarResult r;
    r.pairs = p;
    int64_t correct = 0;
    for (int64_t done = 0; done < examples; done += kMqarBatch) {
      const int64_t b = std::min(kMqarBatch, examples - done);
      data::MqarBatch batch = data::makeMqar(b, seqLen, p, vocab, seed + uint64_t(done) + uint64_t(p) * 1000003u);
      torch::Tensor predicted = forward(batch.inputs.to(device)).argmax(-1).to(torch::kCPU);  // [b, T]
      torch::Tensor asked = batch.targets != kIgnore;
      correct += (predicted.eq(batch.targets) & asked).sum().item<int64_t>();
      r.queries += asked.sum().item<int64_t>();
    }
    r.accuracy = r.queries ? double(correct) / double(r.queries) : 0.0;
    out.push_back(r);
  }
  return out;
}

double unigramEntropy(const std::vector<int64_t>& tokens, int64_t vocab) {
  std::vector<double> counts(static_cast<size_t>(vocab), 0.0);
  for (int64_t t : tokens)
    if (t >= 0 && t < vocab) counts[static_cast<size_t>(t)] += 1.0;
  double n = 0.0, h = 0.0;
  for (double c : counts) n += c;
  for (double c : counts)
    if (c > 0) h -= c / n * std::log(c / n);
  return h;
}

}  // namespace linac::eval
