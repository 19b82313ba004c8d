// The trainer on a real tiny model (embedding -> LayerNorm -> MLP with dropout -> head, ~3.7k
// parameters) over a real in-memory TokenStream: schedule, weight-decay split, learning, exact
// resume, atomic checkpoints, Ctrl-C, non-finite loss, metrics lines.
#include "trainer/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace linac;
using namespace linac::trainer;

namespace {

constexpr int64_t kVocab = 32;

// A next-token rule the MLP can learn from the current token alone (a fixed permutation),
// with 10% uniformly random tokens so the loss has a floor above zero.
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

// Consecutive windows of seqLen + 1 over a token vector, visited in a per-epoch shuffled order
// derived from (seed, epoch) alone, so seek() is exact without replaying.
class VectorStream : public data::TokenStream {
public:
  VectorStream(std::vector<int64_t> tokens, int64_t seqLen, uint64_t seed)
      : tokens_(std::move(tokens)), seqLen_(seqLen), seed_(seed) {
    windows_ = static_cast<int64_t>(tokens_.size() - 1) / seqLen_;
  }
  torch::Tensor next(int64_t batch) override {
    torch::Tensor out = torch::empty({batch, seqLen_ + 1}, torch::kInt64);
    auto acc = out.accessor<int64_t, 2>();
    for (int64_t b = 0; b < batch; ++b, ++position_) {
      int64_t start = order(position_ / windows_)[position_ % windows_] * seqLen_;
      for (int64_t t = 0; t <= seqLen_; ++t)
        acc[b][t] = tokens_[start + t];
    }
    return out;
  }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }
  int64_t tokensPerEpoch() const override { return windows_ * seqLen_; }

private:
  std::vector<int64_t> order(int64_t epoch) const {
    std::vector<int64_t> idx(windows_);
    std::iota(idx.begin(), idx.end(), 0);
    std::mt19937_64 rng(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
    std::shuffle(idx.begin(), idx.end(), rng);
    return idx;
  }
  std::vector<int64_t> tokens_;
  int64_t seqLen_, windows_, position_ = 0;
  uint64_t seed_;
};

struct TinyLMImpl : torch::nn::Module {
  explicit TinyLMImpl(double dropout = 0.1) {
    embed = register_module("embed", torch::nn::Embedding(kVocab, 16));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})));
    up = register_module("up", torch::nn::Linear(16, 64));
    drop = register_module("drop", torch::nn::Dropout(dropout));
    head = register_module("head", torch::nn::Linear(64, kVocab));
    scale = register_buffer("scale", torch::ones({1}));  // a buffer, to be checkpointed too
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    return head(drop(torch::gelu(up(norm(embed(tokens)))))) * scale;
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear up{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear head{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(TinyLM);

constexpr int64_t kSeqLen = 16;

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

// One training run (or run segment): a freshly built model (init seeded by `initSeed`) and a
// fresh stream over the same tokens, as a new process resuming would have.
struct RunLog {
  std::vector<double> losses;
  TrainResult result;
  std::vector<torch::Tensor> params;
};

RunLog train(TrainConfig config, uint64_t initSeed, int64_t stopAfter = -1, bool viaSigint = false) {
  torch::manual_seed(initSeed);
  TinyLM model;
  model->to(config.device);
  VectorStream stream(learnableTokens(4096, 1), config.seqLen, 3);
  RunLog run;
  Trainer* self = nullptr;
  TrainHooks hooks;
  hooks.onStep = [&](const StepStats& s) {
    run.losses.push_back(s.loss);
    if (s.step == stopAfter) {
      if (viaSigint)
        std::raise(SIGINT);
      else
        self->requestStop();
    }
  };
  Trainer trainer(config, model.ptr(), [&](const torch::Tensor& t) { return model->forward(t); }, stream,
                  heldOutWindows(), hooks);
  trainer.setProgressStream(nullptr);
  self = &trainer;
  run.result = trainer.run();
  for (const auto& p : model->parameters())
    run.params.push_back(p.detach().clone());
  return run;
}

// Flat JSON objects as the trainer writes them: string keys, number / null values.
std::map<std::string, std::string> parseFlatJson(const std::string& line) {
  std::map<std::string, std::string> out;
  EXPECT_TRUE(line.size() >= 2 && line.front() == '{' && line.back() == '}') << line;
  std::string body = line.substr(1, line.size() - 2);
  std::stringstream ss(body);
  std::string field;
  while (std::getline(ss, field, ',')) {
    auto colon = field.find(':');
    EXPECT_NE(colon, std::string::npos) << line;
    std::string key = field.substr(0, colon), value = field.substr(colon + 1);
    EXPECT_TRUE(key.size() >= 2 && key.front() == '"' && key.back() == '"') << line;
    if (value != "null") {
      size_t used = 0;
      std::stod(value, &used);
      EXPECT_EQ(used, value.size()) << "not a number: " << value;
    }
    out[key.substr(1, key.size() - 2)] = value;
  }
  return out;
}

std::vector<std::string> readLines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

}  // namespace

TEST(TrainerSchedule, WarmupCosineFloor) {
  TrainConfig c;
  c.steps = 100;
  c.warmupSteps = 10;
  c.lr = 1e-3;
  c.minLrRatio = 0.1;
  EXPECT_DOUBLE_EQ(learningRate(c, 1), 1e-4);
  EXPECT_DOUBLE_EQ(learningRate(c, 5), 5e-4);
  EXPECT_DOUBLE_EQ(learningRate(c, 10), 1e-3);
  EXPECT_NEAR(learningRate(c, 55), 1e-4 + 0.9e-3 * 0.5, 1e-15);  // half-way down the cosine
  EXPECT_NEAR(learningRate(c, 100), 1e-4, 1e-15);                 // the floor at the last step
  EXPECT_NEAR(learningRate(c, 150), 1e-4, 1e-15);                 // and past it
  for (int64_t s = 11; s <= 100; ++s)
    EXPECT_LT(learningRate(c, s), learningRate(c, s - 1)) << s;
  c.warmupSteps = 0;
  EXPECT_DOUBLE_EQ(learningRate(c, 0), 1e-3);
}

TEST(TrainerOptimizer, WeightDecayOnMatricesOnly) {
  TinyLM model;
  ParamGroups g = splitForWeightDecay(*model);
  std::vector<std::string> decay = g.decayNames, noDecay = g.noDecayNames;
  std::sort(decay.begin(), decay.end());
  std::sort(noDecay.begin(), noDecay.end());
  EXPECT_EQ(decay, (std::vector<std::string>{"embed.weight", "head.weight", "up.weight"}));
  EXPECT_EQ(noDecay, (std::vector<std::string>{"head.bias", "norm.bias", "norm.weight", "up.bias"}));

  VectorStream stream(learnableTokens(512, 1), kSeqLen, 3);
  Trainer trainer(tinyConfig(freshDir("groups")), model.ptr(),
                  [&](const torch::Tensor& t) { return model->forward(t); }, stream);
  auto& groups = trainer.optimizer().param_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(static_cast<torch::optim::AdamWOptions&>(groups[0].options()).weight_decay(), 0.1);
  EXPECT_EQ(static_cast<torch::optim::AdamWOptions&>(groups[1].options()).weight_decay(), 0.0);
  EXPECT_EQ(static_cast<torch::optim::AdamWOptions&>(groups[0].options()).betas(), std::make_tuple(0.9, 0.95));
  EXPECT_EQ(groups[0].params().size(), 3u);
  EXPECT_EQ(groups[1].params().size(), 4u);
}

TEST(Trainer, LossDecreasesOnLearnableSequence) {
  TrainConfig c = tinyConfig(freshDir("learn"));
  c.steps = 60;
  RunLog run = train(c, 11);
  ASSERT_EQ(run.losses.size(), 60u);
  EXPECT_GT(run.losses.front(), 3.0);  // ~ln(32) = 3.47 at initialization
  double lastFive = std::accumulate(run.losses.end() - 5, run.losses.end(), 0.0) / 5;
  EXPECT_LT(lastFive, 1.5);
  ASSERT_TRUE(run.result.lastEval.has_value());
  EXPECT_LT(run.result.lastEval->loss, 1.5);
  EXPECT_NEAR(run.result.lastEval->ppl, std::exp(run.result.lastEval->loss), 1e-9);
}

// The key property: a run stopped and resumed from its checkpoint (in a new model, stream and
// trainer, with a different init seed to prove everything comes from the checkpoint) follows the
// uninterrupted run exactly. Dropout makes the generator state part of what must be restored.
void expectExactResume(int64_t accumulation, const std::string& name, torch::Device device = torch::kCPU) {
  const bool cpu = device.is_cpu();
  TrainConfig c = tinyConfig(freshDir(name + "_full"));
  c.accumulation = accumulation;
  c.device = device;
  RunLog full = train(c, 11);
  ASSERT_EQ(full.losses.size(), 20u);

  c.outDir = freshDir(name + "_split");
  RunLog first = train(c, 11, /*stopAfter=*/10);
  EXPECT_TRUE(first.result.interrupted);
  EXPECT_EQ(first.result.step, 10);
  ASSERT_EQ(first.losses.size(), 10u);

  c.resume = true;
  RunLog second = train(c, /*initSeed=*/999);
  EXPECT_EQ(second.result.resumedFrom, 10);
  EXPECT_EQ(second.result.step, 20);
  EXPECT_FALSE(second.result.interrupted);
  ASSERT_EQ(second.losses.size(), 10u);

  std::vector<double> resumed = first.losses;
  resumed.insert(resumed.end(), second.losses.begin(), second.losses.end());
  // CUDA kernels may reduce in a different order run to run (atomics), so the GPU check allows
  // bf16-level noise; on the CPU the curves must match bit for bit.
  for (size_t i = 0; i < 20; ++i)
    EXPECT_NEAR(resumed[i], full.losses[i], cpu ? 1e-6 : 2e-2) << "step " << i + 1;
  if (cpu) {
    EXPECT_EQ(resumed, full.losses) << "expected bit-for-bit equality on the CPU";
    for (size_t i = 0; i < full.params.size(); ++i)
      EXPECT_TRUE(torch::equal(full.params[i], second.params[i])) << "parameter " << i;
  }

  // The split run's metrics hold each step once, in order.
  std::vector<int64_t> steps;
  for (const auto& line : readLines(fs::path(c.outDir) / "metrics.jsonl")) {
    auto kv = parseFlatJson(line);
    if (kv.count("loss"))
      steps.push_back(std::stoll(kv["step"]));
  }
  std::vector<int64_t> expected(20);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(steps, expected);
}

TEST(Trainer, ResumeIsExact) { expectExactResume(1, "resume1"); }
TEST(Trainer, ResumeIsExactWithAccumulation) { expectExactResume(3, "resume3"); }

TEST(Trainer, CheckpointsAreAtomicAndLatestPointsToNewest) {
  TrainConfig c = tinyConfig(freshDir("atomic"));
  c.checkpointEvery = 5;
  c.keepCheckpoints = 2;
  RunLog run = train(c, 11);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(c.outDir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-15.pt", "ckpt-20.pt", "config.json", "latest", "metrics.jsonl"}));
  EXPECT_EQ(readLines(fs::path(c.outDir) / "latest"), (std::vector<std::string>{"ckpt-20.pt"}));
  EXPECT_EQ(run.result.lastCheckpoint, (fs::path(c.outDir) / "ckpt-20.pt").string());
}

TEST(Trainer, SigintCheckpointsAndStops) {
  TrainConfig c = tinyConfig(freshDir("sigint"));
  RunLog run = train(c, 11, /*stopAfter=*/4, /*viaSigint=*/true);
  EXPECT_TRUE(run.result.interrupted);
  EXPECT_EQ(run.result.step, 4);
  EXPECT_EQ(run.losses.size(), 4u);
  EXPECT_TRUE(fs::exists(fs::path(c.outDir) / "ckpt-4.pt"));
  EXPECT_EQ(readLines(fs::path(c.outDir) / "latest"), (std::vector<std::string>{"ckpt-4.pt"}));
  // The handler is gone after run(): the default action is back.
  struct sigaction current {};
  ::sigaction(SIGINT, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
}

TEST(Trainer, NonFiniteLossNamesStepAndLayer) {
  TinyLM model;
  VectorStream stream(learnableTokens(1024, 1), kSeqLen, 3);
  int64_t calls = 0;
  auto forward = [&](const torch::Tensor& t) {
    torch::Tensor logits = model->forward(t);
    return ++calls == 3 ? logits * std::numeric_limits<float>::quiet_NaN() : logits;
  };
  TrainHooks hooks;
  torch::Tensor seenInputs;
  hooks.locateNonFinite = [&](const torch::Tensor& inputs) {
    seenInputs = inputs;
    return std::string("first non-finite value in layer 1 (mlp) output");
  };
  TrainConfig c = tinyConfig(freshDir("nan"));
  Trainer trainer(c, model.ptr(), forward, stream, {}, hooks);
  trainer.setProgressStream(nullptr);
  try {
    trainer.run();
    FAIL() << "a NaN loss must stop the run";
  } catch (const TrainError& e) {
    EXPECT_EQ(e.step(), 3);
    EXPECT_EQ(std::string(e.what()), "loss is nan at step 3: first non-finite value in layer 1 (mlp) output");
  }
  // The hook got that step's batch inputs [batch, seqLen] (the third of the stream's batches).
  VectorStream replay(learnableTokens(1024, 1), kSeqLen, 3);
  replay.next(2 * c.batch);
  ASSERT_TRUE(seenInputs.defined());
  EXPECT_TRUE(torch::equal(seenInputs, replay.next(c.batch).slice(1, 0, kSeqLen)));
  EXPECT_FALSE(fs::exists(fs::path(c.outDir) / "ckpt-3.pt"));  // a broken state is not saved
  // The diagnostic is the metrics file's last line.
  auto lines = readLines(fs::path(c.outDir) / "metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(),
            R"({"step":3,"error":"loss is nan at step 3: first non-finite value in layer 1 (mlp) output"})");
}

// Explicit-target batches [b, 2, T] (data::TokenStream's second layout, e.g. MQAR): the loss is
// the cross entropy over the targeted positions only, and evaluation reports their accuracy.
class MaskedStream : public data::TokenStream {
public:
  torch::Tensor next(int64_t batch) override {
    torch::Tensor out = window(position_, batch);
    position_ += batch;
    return out;
  }
  // [batch, 2, kSeqLen]: random inputs; targets perm-like at every 4th position, -100 elsewhere.
  static torch::Tensor window(int64_t first, int64_t batch) {
    torch::Tensor inputs = torch::randint(0, kVocab, {batch, kSeqLen},
                                          torch::make_generator<at::CPUGeneratorImpl>(1000 + first));
    torch::Tensor targets = torch::full({batch, kSeqLen}, int64_t{-100}, torch::kInt64);
    targets.slice(1, 0, kSeqLen, 4).copy_((inputs.slice(1, 0, kSeqLen, 4) * 5 + 3) % kVocab);
    return torch::stack({inputs, targets}, 1);
  }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }
  int64_t tokensPerEpoch() const override { return 0; }

private:
  int64_t position_ = 0;
};

TEST(Trainer, ExplicitTargetsScoreOnlyTargetedPositions) {
  torch::manual_seed(5);
  TinyLM model(/*dropout=*/0.0);
  TinyLM reference(/*dropout=*/0.0);
  {
    torch::NoGradGuard noGrad;
    for (size_t i = 0; i < model->parameters().size(); ++i) reference->parameters()[i].copy_(model->parameters()[i]);
  }
  const torch::Tensor first = MaskedStream::window(0, 4);  // [4, 2, kSeqLen]: step 1's batch
  torch::Tensor logits = reference->forward(first.select(1, 0));  // [4, kSeqLen, kVocab]
  torch::Tensor mask = first.select(1, 1) != -100;                  // [4, kSeqLen]
  const double expected = torch::nn::functional::cross_entropy(logits.index({mask}), first.select(1, 1).index({mask}))
                              .item<double>();
  // Logits at untargeted positions do not matter: garbage there leaves the loss unchanged.
  std::vector<double> losses;
  TrainHooks hooks;
  hooks.onStep = [&](const StepStats& s) { losses.push_back(s.loss); };
  MaskedStream stream;
  TrainConfig c = tinyConfig(freshDir("masked"));
  c.steps = 40;
  c.evalEvery = 40;
  Trainer trainer(c, model.ptr(), [&](const torch::Tensor& t) {
    torch::Tensor out = model->forward(t);  // [b, T, V]
    torch::Tensor junk = torch::zeros_like(out);
    junk.slice(1, 1, kSeqLen, 4).fill_(1e4);  // only on untargeted positions 1, 5, 9, ...
    return out + junk;
  }, stream, MaskedStream::window(1 << 20, 32), hooks);
  trainer.setProgressStream(nullptr);
  TrainResult r = trainer.run();
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_NEAR(losses.front(), expected, 1e-5);
  EXPECT_LT(losses.back(), losses.front() - 1.0) << "the targeted rule is learnable from the input token";
  ASSERT_TRUE(r.lastEval.has_value());
  EXPECT_EQ(r.lastEval->targets, 32 * kSeqLen / 4);
  EXPECT_GT(r.lastEval->accuracy, 0.5);
  auto lines = readLines(fs::path(c.outDir) / "metrics.jsonl");
  auto eval = parseFlatJson(lines.back());
  ASSERT_TRUE(eval.count("eval_accuracy")) << lines.back();
  EXPECT_NEAR(std::stod(eval["eval_accuracy"]), r.lastEval->accuracy, 1e-9);
}

TEST(Trainer, MetricsLinesParse) {
  TrainConfig c = tinyConfig(freshDir("metrics"));
  c.steps = 6;
  c.logEvery = 2;
  c.evalEvery = 3;
  std::ostringstream progress;
  torch::manual_seed(1);
  TinyLM model;
  VectorStream stream(learnableTokens(1024, 1), kSeqLen, 3);
  Trainer trainer(c, model.ptr(), [&](const torch::Tensor& t) { return model->forward(t); }, stream,
                  heldOutWindows());
  trainer.setProgressStream(&progress);
  trainer.run();

  std::vector<int64_t> trainSteps, evalSteps;
  for (const auto& line : readLines(fs::path(c.outDir) / "metrics.jsonl")) {
    auto kv = parseFlatJson(line);
    if (kv.count("eval_loss")) {
      evalSteps.push_back(std::stoll(kv["step"]));
      EXPECT_NEAR(std::stod(kv["eval_ppl"]), std::exp(std::stod(kv["eval_loss"])), 1e-6 * std::stod(kv["eval_ppl"]));
    } else {
      for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed"})
        EXPECT_TRUE(kv.count(key)) << key << " missing in " << line;
      EXPECT_GT(std::stod(kv["tokens_per_s"]), 0);
      trainSteps.push_back(std::stoll(kv["step"]));
    }
  }
  EXPECT_EQ(trainSteps, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(evalSteps, (std::vector<int64_t>{3, 6}));
  std::string out = progress.str();
  EXPECT_NE(out.find("step 2/6 | loss "), std::string::npos) << out;
  EXPECT_NE(out.find(" tok/s | ETA "), std::string::npos) << out;
}

// GPU only (skipped elsewhere): the forward runs under bf16 autocast with fp32 master weights,
// the autocast state is restored afterwards, and resume (with CUDA generator state) holds.
TEST(TrainerGpu, Bf16AutocastAndResumeOnCuda) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(11);
  TinyLM model;
  model->to(torch::kCUDA);
  VectorStream stream(learnableTokens(4096, 1), kSeqLen, 3);
  TrainConfig c = tinyConfig(freshDir("gpu"));
  c.device = torch::kCUDA;
  c.steps = 60;
  torch::ScalarType seen = torch::kFloat32;
  std::vector<double> losses;
  TrainHooks hooks;
  hooks.onStep = [&](const StepStats& s) { losses.push_back(s.loss); };
  Trainer trainer(c, model.ptr(), [&](const torch::Tensor& t) {
    // A Linear's output dtype shows whether autocast is on (the logits themselves are promoted
    // back to fp32 by the multiply with the fp32 `scale` buffer).
    seen = model->up(model->norm(model->embed(t))).scalar_type();
    return model->forward(t);
  }, stream, heldOutWindows(), hooks);
  trainer.setProgressStream(nullptr);
  TrainResult r = trainer.run();
  EXPECT_EQ(seen, torch::kBFloat16);
  EXPECT_EQ(model->up->weight.scalar_type(), torch::kFloat32);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCUDA));
  ASSERT_EQ(losses.size(), 60u);
  EXPECT_LT(losses.back(), losses.front() - 1.0);
  ASSERT_TRUE(r.lastEval.has_value());
  EXPECT_LT(r.lastEval->loss, 1.5);

  expectExactResume(2, "gpu_resume", torch::kCUDA);
}
