// MQAR as a training task (`linac train --task mqar`) on a small HybridLM (a Gated DeltaNet
// layer + a full-attention layer, hidden 64) through the real Trainer: the loss on the answers
// falls, evaluation reports accuracy, a resume continues the MQAR stream exactly; and a NaN
// injected into one layer stops the run with a message that names that layer.
#include "data/data.h"
#include "linac/Spec/SpecParser.h"
#include "model/model.h"
#include "trainer/trainer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <filesystem>
#include <fstream>
#include <limits>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace linac;

namespace {

const std::string kSpecs = LINAC_SPECS_DIR;
constexpr int64_t kVocab = 32;   // keys 1..15, values 16..31: chance is 1/16 over values
constexpr int64_t kPairs = 2;
constexpr int64_t kSeqLen = 16;  // 2 pairs of context + 6 query slots

model::ModelConfig smallConfig() {
  model::ModelConfig c;
  c.preset = spec::loadPreset("tiny", kSpecs + "/presets");
  c.preset.hidden = 64;
  c.preset.layers = 2;
  c.preset.attnHeads = 2;
  c.preset.vocab = kVocab;
  c.preset.intermediate = 128;
  c.linear = spec::loadVariant(kSpecs + "/gated_deltanet.yaml");
  c.attention = spec::loadVariant(kSpecs + "/attention.yaml");
  c.schedule = spec::loadSchedule("1:1");  // gated_deltanet, attention
  return c;
}

std::string freshDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("linac_mqar_train_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  return dir.string();
}

trainer::TrainConfig mqarConfig(const std::string& outDir, int64_t steps, uint64_t seed) {
  trainer::TrainConfig c;
  c.steps = steps;
  c.batch = 32;
  c.seqLen = kSeqLen;
  c.lr = 3e-3;
  c.warmupSteps = 10;
  c.logEvery = 10;
  c.evalEvery = steps;
  c.checkpointEvery = 0;
  c.outDir = outDir;
  c.seed = seed;
  return c;
}

torch::Tensor heldOutMqar(uint64_t seed) {
  data::MqarBatch m = data::makeMqar(256, kSeqLen, kPairs, kVocab, seed + 1);
  return torch::stack({m.inputs, m.targets}, 1);  // [256, 2, kSeqLen]
}

struct RunLog {
  std::vector<double> losses;
  trainer::TrainResult result;
  std::vector<torch::Tensor> params;
};

RunLog train(trainer::TrainConfig c, uint64_t seed) {
  torch::manual_seed(seed);
  model::HybridLM lm(smallConfig());
  auto stream = data::makeMqarStream(kSeqLen, kPairs, kVocab, seed);
  RunLog run;
  trainer::TrainHooks hooks;
  hooks.onStep = [&](const trainer::StepStats& s) { run.losses.push_back(s.loss); };
  hooks.locateNonFinite = [&](const torch::Tensor& inputs) { return lm->locateNonFinite(inputs); };
  trainer::Trainer t(c, lm.ptr(), [&](const torch::Tensor& x) { return lm->forward(x); }, *stream,
                     heldOutMqar(seed), hooks);
  t.setProgressStream(nullptr);
  run.result = t.run();
  for (const auto& p : lm->parameters()) run.params.push_back(p.detach().clone());
  return run;
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / double(to - from);
}

}  // namespace

// What is asserted is what held for every seed tried (0-6, 200 steps, ~6-10 s on one core): the
// answer loss falls from ~3.5 nats to below 1 (uniform over the 16 values is ln 16 = 2.77) and
// held-out accuracy exceeds 0.4 (chance 1/16): the model reliably learns to answer with a value
// of the sequence. Real recall (accuracy well above 1/2, the two-pair guess) is reached by most
// seeds (0, 1, 2, 3, 5: 0.91-0.98) but not all (4, 6 sit at ~0.51-0.54 at 200 steps), so it is
// printed, not asserted. LINAC_MQAR_TEST_SEED / LINAC_MQAR_TEST_STEPS repeat the study.
TEST(MqarTraining, LossOnAnswersDecreasesAboveChance) {
  const int64_t steps = std::getenv("LINAC_MQAR_TEST_STEPS") ? std::atoll(std::getenv("LINAC_MQAR_TEST_STEPS")) : 200;
  const uint64_t seed = std::getenv("LINAC_MQAR_TEST_SEED") ? std::atoll(std::getenv("LINAC_MQAR_TEST_SEED")) : 0;
  RunLog run = train(mqarConfig(freshDir("learn"), steps, seed), seed);
  ASSERT_EQ(run.losses.size(), size_t(steps));
  const double first = mean(run.losses, 0, 5), last = mean(run.losses, run.losses.size() - 10, run.losses.size());
  ASSERT_TRUE(run.result.lastEval.has_value());
  const auto& eval = *run.result.lastEval;
  std::cout << "[ mqar ] seed " << seed << ": loss " << first << " -> " << last << "; held-out loss " << eval.loss
            << ", accuracy " << eval.accuracy << " over " << eval.targets << " answers (chance 1/16 = 0.0625, "
            << "a value of the sequence 1/" << kPairs << ")\n";
  EXPECT_GT(first, 3.0);
  EXPECT_LT(last, 1.0);
  EXPECT_EQ(eval.targets, 256 * kPairs);
  EXPECT_GT(eval.accuracy, 0.4);
}

// Resume: 4 steps, then 4 more from the checkpoint in a fresh model and stream, equal 8 straight.
TEST(MqarTraining, ResumeContinuesTheStream) {
  trainer::TrainConfig straight = mqarConfig(freshDir("straight"), 8, 4);
  straight.evalEvery = 0;
  RunLog full = train(straight, 4);
  trainer::TrainConfig part = mqarConfig(freshDir("parts"), 8, 4);  // the same schedule (steps = 8)...
  part.evalEvery = 0;
  // ... stopped after step 4 (as Ctrl-C would), then resumed by a fresh model and stream.
  {
    torch::manual_seed(4);
    model::HybridLM lm(smallConfig());
    auto stream = data::makeMqarStream(kSeqLen, kPairs, kVocab, 4);
    trainer::Trainer* self = nullptr;
    trainer::TrainHooks hooks;
    hooks.onStep = [&](const trainer::StepStats& s) {
      if (s.step == 4) self->requestStop();
    };
    trainer::Trainer t(part, lm.ptr(), [&](const torch::Tensor& x) { return lm->forward(x); }, *stream, {}, hooks);
    self = &t;
    t.setProgressStream(nullptr);
    EXPECT_TRUE(t.run().interrupted);
  }
  part.resume = true;
  RunLog resumed = train(part, 4);
  EXPECT_EQ(resumed.result.resumedFrom, 4);
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(resumed.losses[i], full.losses[4 + i]) << "step " << 5 + i;
  ASSERT_EQ(resumed.params.size(), full.params.size());
  for (size_t i = 0; i < full.params.size(); ++i) EXPECT_TRUE(torch::equal(resumed.params[i], full.params[i]));
}

// A NaN in one layer's parameter: the run stops at that step naming the layer and the parameter,
// in the exception and in metrics.jsonl.
TEST(MqarTraining, NanNamesTheLayer) {
  torch::manual_seed(1);
  model::HybridLM lm(smallConfig());
  auto stream = data::makeMqarStream(kSeqLen, kPairs, kVocab, 1);
  trainer::TrainHooks hooks;
  hooks.locateNonFinite = [&](const torch::Tensor& inputs) { return lm->locateNonFinite(inputs); };
  hooks.onStep = [&](const trainer::StepStats& s) {
    if (s.step == 2) {  // poisons step 3's forward: layer 1 (attention) MLP's first gate weight
      torch::NoGradGuard noGrad;
      lm->named_parameters()["blocks.1.mlp_gate"].view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
    }
  };
  trainer::TrainConfig c = mqarConfig(freshDir("nan"), 10, 1);
  trainer::Trainer t(c, lm.ptr(), [&](const torch::Tensor& x) { return lm->forward(x); }, *stream, {}, hooks);
  t.setProgressStream(nullptr);
  std::string message;
  try {
    t.run();
    FAIL() << "a NaN parameter must stop the run";
  } catch (const trainer::TrainError& e) {
    EXPECT_EQ(e.step(), 3);
    message = e.what();
  }
  EXPECT_EQ(message.rfind("loss is nan at step 3: first non-finite value in layer 1 (mlp) output (", 0), 0u) << message;
  EXPECT_NE(message.find("; non-finite parameter blocks.1.mlp_gate (1 of "), std::string::npos) << message;
  std::ifstream metrics(fs::path(c.outDir) / "metrics.jsonl");
  std::string line, last;
  while (std::getline(metrics, line)) last = line;
  EXPECT_EQ(last.rfind("{\"step\":3,\"error\":\"loss is nan at step 3: first non-finite value in layer 1 (mlp)", 0), 0u)
      << last;
}
