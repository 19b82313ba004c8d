// What the trainer tests share: a real tiny model (embedding -> LayerNorm -> MLP with dropout ->
// head, ~3.7k parameters) over a real in-memory TokenStream whose next-token rule it can learn,
// run directories under the temporary directory, and a helper that trains one run (segment) the
// way a new process would.
#pragma once

#include "trainer/trainer.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace linac::trainer::test {

constexpr int64_t kVocab = 32;
constexpr int64_t kSeqLen = 16;

/// A next-token rule the MLP can learn from the current token alone (a fixed permutation),
/// with 10% uniformly random tokens so the loss has a floor above zero.
std::vector<int64_t> learnableTokens(int64_t n, uint64_t seed);

/// Consecutive windows of seqLen + 1 over a token vector, visited in a per-epoch shuffled order
/// derived from (seed, epoch) alone, so seek() is exact without replaying.
class VectorStream : public data::TokenStream {
public:
  VectorStream(std::vector<int64_t> tokens, int64_t seqLen, uint64_t seed);
  torch::Tensor next(int64_t batch) override;
  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }
  int64_t tokensPerEpoch() const override { return windows_ * seqLen_; }

private:
  std::vector<int64_t> order(int64_t epoch) const;
  std::vector<int64_t> tokens_;
  int64_t seqLen_, windows_, position_ = 0;
  uint64_t seed_;
};

struct TinyLMImpl : torch::nn::Module {
  explicit TinyLMImpl(double dropout = 0.1);
  torch::Tensor forward(const torch::Tensor& tokens);
  torch::nn::Embedding embed{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear up{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear head{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(TinyLM);

/// An empty path under the temporary directory, unique to this process.
std::string freshDir(const std::string& name);
/// 20 steps of batch 4, lr 1e-2, warmup 3, a metrics line per step, seed 7, into outDir.
TrainConfig tinyConfig(const std::string& outDir);
/// 8 held-out windows [8, kSeqLen + 1] of the same rule.
torch::Tensor heldOutWindows();

/// One training run (or run segment): a freshly built model (init seeded by `initSeed`) and a
/// fresh stream over the same tokens, as a new process resuming would have. With stopAfter,
/// that step's onStep raises `stopSignal` (0: calls requestStop()).
struct RunLog {
  std::vector<double> losses;
  std::vector<double> lrs;
  TrainResult result;
  std::vector<torch::Tensor> params;
  std::string progress;  // what the trainer printed
};
RunLog train(TrainConfig config, uint64_t initSeed, int64_t stopAfter = -1, int stopSignal = 0,
             std::vector<RunFile> runFiles = {});

std::vector<std::string> readLines(const std::string& path);
std::string readFile(const std::string& path);
void writeFile(const std::string& path, const std::string& contents);
/// Every file of a directory tree, relative path -> bytes: to check that nothing changed.
std::vector<std::pair<std::string, std::string>> snapshot(const std::string& dir);

}  // namespace linac::trainer::test
