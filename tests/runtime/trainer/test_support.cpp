#include "test_support.h"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <unistd.h>

namespace fs = std::filesystem;

namespace linac::trainer::test {

std::vector<int64_t> learnableTokens(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> perm(kVocab);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int64_t> tokens(n);
  tokens[0] = 0;
  for (int64_t i = 1; i < n; ++i)
    tokens[i] = (rng() % 10 == 0) ? static_cast<int64_t>(rng() % kVocab) : perm[tokens[i - 1]];
  return tokens;
}

VectorStream::VectorStream(std::vector<int64_t> tokens, int64_t seqLen, uint64_t seed)
    : tokens_(std::move(tokens)), seqLen_(seqLen), seed_(seed) {
  windows_ = static_cast<int64_t>(tokens_.size() - 1) / seqLen_;
}

torch::Tensor VectorStream::next(int64_t batch) {
  torch::Tensor out = torch::empty({batch, seqLen_ + 1}, torch::kInt64);
  auto acc = out.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch; ++b, ++position_) {
    int64_t start = order(position_ / windows_)[position_ % windows_] * seqLen_;
    for (int64_t t = 0; t <= seqLen_; ++t)
      acc[b][t] = tokens_[start + t];
  }
  return out;
}

std::vector<int64_t> VectorStream::order(int64_t epoch) const {
  std::vector<int64_t> idx(windows_);
  std::iota(idx.begin(), idx.end(), 0);
  std::mt19937_64 rng(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
  std::shuffle(idx.begin(), idx.end(), rng);
  return idx;
}

TinyLMImpl::TinyLMImpl(double dropout) {
  embed = register_module("embed", torch::nn::Embedding(kVocab, 16));
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})));
  up = register_module("up", torch::nn::Linear(16, 64));
  drop = register_module("drop", torch::nn::Dropout(dropout));
  head = register_module("head", torch::nn::Linear(64, kVocab));
  scale = register_buffer("scale", torch::ones({1}));  // a buffer, to be checkpointed too
}

torch::Tensor TinyLMImpl::forward(const torch::Tensor& tokens) {
  return head(drop(torch::gelu(up(norm(embed(tokens)))))) * scale;
}

std::string freshDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("linac_trainer_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  return dir.string();
}

TrainConfig tinyConfig(const std::string& outDir) {
  TrainConfig c;
  c.steps = 20;
  c.batch = 4;
  c.seqLen = kSeqLen;
  c.lr = 1e-2;
  c.warmupSteps = 3;
  c.logEvery = 1;
  c.outDir = outDir;
  c.seed = 7;
  return c;
}

torch::Tensor heldOutWindows() {
  std::vector<int64_t> tokens = learnableTokens(8 * (kSeqLen + 1), 1);  // same rule: seed 1 permutation
  return torch::tensor(tokens, torch::kInt64).reshape({8, kSeqLen + 1});
}

RunLog train(TrainConfig config, uint64_t initSeed, int64_t stopAfter, int stopSignal, std::vector<RunFile> runFiles) {
  torch::manual_seed(initSeed);
  TinyLM model;
  model->to(config.device);
  VectorStream stream(learnableTokens(4096, 1), config.seqLen, 3);
  RunLog run;
  Trainer* self = nullptr;
  TrainHooks hooks;
  hooks.onStep = [&](const StepStats& s) {
    run.losses.push_back(s.loss);
    run.lrs.push_back(s.lr);
    if (s.step == stopAfter) {
      if (stopSignal != 0)
        std::raise(stopSignal);
      else
        self->requestStop();
    }
  };
  Trainer trainer(config, model.ptr(), [&](const torch::Tensor& t) { return model->forward(t); }, stream,
                  heldOutWindows(), hooks);
  std::ostringstream progress;
  trainer.setProgressStream(&progress);
  trainer.setRunFiles(std::move(runFiles));
  self = &trainer;
  run.result = trainer.run();
  run.progress = progress.str();
  for (const auto& p : model->parameters())
    run.params.push_back(p.detach().clone());
  return run;
}

std::vector<std::string> readLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void writeFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

std::vector<std::pair<std::string, std::string>> snapshot(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      files.emplace_back(fs::relative(e.path(), dir).string(), readFile(e.path().string()));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace linac::trainer::test
