// The trainer on a real tiny model over a real in-memory TokenStream (test_support.h): schedule,
// weight-decay split, learning, exact resume, atomic checkpoints, Ctrl-C, non-finite loss,
// metrics lines. The run directory's guarantees are in run_dir_test.cpp.
#include "test_support.h"
#include "trainer/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <map>
#include <numeric>
#include <sstream>

namespace fs = std::filesystem;
using namespace linac;
using namespace linac::trainer;
using namespace linac::trainer::test;
using Json = nlohmann::json;

namespace {

// A metrics line: one JSON object.
Json parseLine(const std::string& line) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << line;
  return j;
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
  for (const auto& line : readLines(c.outDir + "/metrics.jsonl")) {
    Json j = parseLine(line);
    if (j.contains("loss"))
      steps.push_back(j["step"].get<int64_t>());
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
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-15.json", "ckpt-15.pt", "ckpt-20.json", "ckpt-20.pt",
                                              "config.json", "latest", "lock", "metrics.jsonl"}));
  EXPECT_EQ(readLines(c.outDir + "/latest"), (std::vector<std::string>{"ckpt-20.pt"}));
  EXPECT_EQ(run.result.lastCheckpoint, (fs::path(c.outDir) / "ckpt-20.pt").string());
}

TEST(Trainer, SigintCheckpointsAndStops) {
  TrainConfig c = tinyConfig(freshDir("sigint"));
  RunLog run = train(c, 11, /*stopAfter=*/4, SIGINT);
  EXPECT_TRUE(run.result.interrupted);
  EXPECT_EQ(run.result.stopSignal, SIGINT);
  EXPECT_EQ(run.result.step, 4);
  EXPECT_EQ(run.losses.size(), 4u);
  EXPECT_TRUE(fs::exists(fs::path(c.outDir) / "ckpt-4.pt"));
  EXPECT_EQ(readLines(c.outDir + "/latest"), (std::vector<std::string>{"ckpt-4.pt"}));
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
  auto lines = readLines(c.outDir + "/metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(),
            R"({"step":3,"error":"loss is nan at step 3: first non-finite value in layer 1 (mlp) output"})");
}

// Without an onStep hook the values are read every logEvery steps: a non-finite loss at step 3
// is found at step 5's read, and reported as before (its step, its batch), at the parameters step
// 3 started from (steps 3-5 were skipped on the device), with no checkpoint written.
TEST(Trainer, NonFiniteLossFoundAtALaterReadNamesItsStep) {
  TrainConfig c = tinyConfig(freshDir("nan_deferred"));
  c.logEvery = 5;
  c.checkpointEvery = 10;
  auto makeModel = [] {
    torch::manual_seed(21);
    return TinyLM(/*dropout=*/0.0);
  };
  TinyLM model = makeModel();
  VectorStream stream(learnableTokens(1024, 1), kSeqLen, 3);
  int64_t calls = 0;
  auto forward = [&](const torch::Tensor& t) {
    torch::Tensor logits = model->forward(t);
    return ++calls == 3 ? logits * std::numeric_limits<float>::quiet_NaN() : logits;
  };
  TrainHooks hooks;
  torch::Tensor seenInputs;
  std::vector<torch::Tensor> seenParams;
  hooks.locateNonFinite = [&](const torch::Tensor& inputs) {
    seenInputs = inputs;
    for (const auto& p : model->parameters()) seenParams.push_back(p.detach().clone());
    return std::string("found");
  };
  Trainer trainer(c, model.ptr(), forward, stream, {}, hooks);
  trainer.setProgressStream(nullptr);
  try {
    trainer.run();
    FAIL() << "a NaN loss must stop the run";
  } catch (const TrainError& e) {
    EXPECT_EQ(e.step(), 3);
    EXPECT_EQ(std::string(e.what()), "loss is nan at step 3: found");
  }
  EXPECT_EQ(calls, 5) << "found at the read of step 5";
  VectorStream replay(learnableTokens(1024, 1), kSeqLen, 3);
  replay.next(2 * c.batch);
  ASSERT_TRUE(seenInputs.defined());
  EXPECT_TRUE(torch::equal(seenInputs, replay.next(c.batch).slice(1, 0, kSeqLen)));
  EXPECT_EQ(readLines(c.outDir + "/metrics.jsonl").back(), R"({"step":3,"error":"loss is nan at step 3: found"})");
  EXPECT_FALSE(fs::exists(fs::path(c.outDir) / "ckpt-5.pt"));

  // The parameters the locator saw are those after step 2.
  TinyLM two = makeModel();
  VectorStream twoStream(learnableTokens(1024, 1), kSeqLen, 3);
  TrainConfig twoSteps = c;
  twoSteps.outDir = freshDir("nan_deferred_two");
  twoSteps.steps = 2;
  twoSteps.scheduleSteps = c.steps;  // the same learning rates
  Trainer reference(twoSteps, two.ptr(), [&](const torch::Tensor& t) { return two->forward(t); }, twoStream);
  reference.setProgressStream(nullptr);
  reference.run();
  ASSERT_EQ(seenParams.size(), two->parameters().size());
  for (size_t i = 0; i < seenParams.size(); ++i)
    EXPECT_TRUE(torch::equal(seenParams[i], two->parameters()[i].detach())) << "parameter " << i;
}

// Reading the values every 4 steps instead of every step changes neither the training nor the
// values logged at the steps both runs log.
TEST(Trainer, LoggedValuesDoNotDependOnLogEvery) {
  auto run = [](int64_t logEvery, const std::string& name) {
    TrainConfig c = tinyConfig(freshDir(name));
    c.logEvery = logEvery;
    torch::manual_seed(11);
    TinyLM model;
    VectorStream stream(learnableTokens(4096, 1), kSeqLen, 3);
    Trainer trainer(c, model.ptr(), [&](const torch::Tensor& t) { return model->forward(t); }, stream);
    trainer.setProgressStream(nullptr);
    trainer.run();
    std::map<int64_t, std::pair<double, double>> logged;  // step -> loss, grad_norm
    for (const auto& line : readLines(c.outDir + "/metrics.jsonl")) {
      Json j = parseLine(line);
      if (j.contains("loss"))
        logged[j["step"].get<int64_t>()] = {j["loss"].get<double>(), j["grad_norm"].get<double>()};
    }
    std::vector<torch::Tensor> params;
    for (const auto& p : model->parameters()) params.push_back(p.detach().clone());
    return std::make_pair(logged, params);
  };
  auto [everyStep, paramsEvery] = run(1, "log_every_1");
  auto [everyFourth, paramsFourth] = run(4, "log_every_4");
  ASSERT_EQ(everyStep.size(), 20u);
  ASSERT_EQ(everyFourth.size(), 5u);
  for (const auto& [step, values] : everyFourth) {
    EXPECT_EQ(step % 4, 0);
    EXPECT_EQ(values, everyStep.at(step)) << "step " << step;
  }
  for (size_t i = 0; i < paramsEvery.size(); ++i) EXPECT_TRUE(torch::equal(paramsEvery[i], paramsFourth[i])) << i;
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
  auto lines = readLines(c.outDir + "/metrics.jsonl");
  Json eval = parseLine(lines.back());
  ASSERT_TRUE(eval.contains("eval_accuracy")) << lines.back();
  EXPECT_NEAR(eval["eval_accuracy"].get<double>(), r.lastEval->accuracy, 1e-9);
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
  for (const auto& line : readLines(c.outDir + "/metrics.jsonl")) {
    Json j = parseLine(line);
    if (j.contains("eval_loss")) {
      evalSteps.push_back(j["step"].get<int64_t>());
      const double ppl = j["eval_ppl"].get<double>();
      EXPECT_NEAR(ppl, std::exp(j["eval_loss"].get<double>()), 1e-6 * ppl);
    } else {
      for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed"})
        EXPECT_TRUE(j.contains(key) && j[key].is_number()) << key << " missing in " << line;
      EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
      trainSteps.push_back(j["step"].get<int64_t>());
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
