// The model's fused loss path (model::HybridLMImpl::loss, through ops::linearCrossEntropy) against
// the unfused one (forward's logits, then cross_entropy): the loss and every parameter's gradient
// of a small HybridLM, and the training loss curves of a few steps through the real Trainer with
// `--fused-loss on` (Trainer::setLoss) and off, on MQAR batches whose targets are -100 where
// nothing is scored.
#include "data/data.h"
#include "linac/Spec/SpecParser.h"
#include "model/model.h"
#include "trainer/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace linac;

namespace {

const std::string kSpecs = LINAC_SPECS_DIR;
constexpr int64_t kVocab = 48, kPairs = 2, kSeqLen = 16, kSteps = 8;

model::ModelConfig smallConfig(bool tied) {
  model::ModelConfig c;
  c.preset = spec::loadPreset("tiny", kSpecs + "/presets");
  c.preset.hidden = 32;
  c.preset.layers = 2;
  c.preset.attnHeads = 2;
  c.preset.vocab = kVocab;
  c.preset.intermediate = 64;
  c.preset.tieEmbeddings = tied;
  c.linear = spec::loadVariant(kSpecs + "/gated_deltanet.yaml");
  c.attention = spec::loadVariant(kSpecs + "/attention.yaml");
  c.schedule = spec::loadSchedule("1:1");
  return c;
}

double relativeError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).norm().item<double>() / std::max(want.norm().item<double>(), 1e-30);
}

}  // namespace

TEST(FusedLoss, ModelLossAndGradientsMatchTheLogitsPath) {
  for (bool tied : {false, true}) {
    torch::manual_seed(1);
    model::HybridLM lm(smallConfig(tied));
    torch::Tensor tokens = torch::randint(0, kVocab, {3, kSeqLen}, torch::kInt64);   // [3, T]
    torch::Tensor targets = torch::randint(0, kVocab, {3, kSeqLen}, torch::kInt64);  // [3, T]
    targets.slice(1, 0, kSeqLen, 3).fill_(data::kIgnoreTarget);

    torch::Tensor logits = lm->forward(tokens);  // [3, T, V]
    torch::Tensor unfused = torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}).to(torch::kFloat32),
                                                                 targets.reshape({-1}));
    unfused.backward();
    std::vector<torch::Tensor> want;
    for (auto& p : lm->parameters()) {
      want.push_back(p.grad().clone());
      p.mutable_grad() = torch::Tensor();
    }
    torch::Tensor fused = lm->loss(tokens, targets);
    fused.backward();
    EXPECT_NEAR(fused.item<double>(), unfused.item<double>(), 1e-6 * unfused.item<double>()) << "tied " << tied;
    const auto params = lm->named_parameters();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_LT(relativeError(params[i].value().grad(), want[i]), 1e-5) << params[i].key() << " tied " << tied;
  }
}

TEST(FusedLoss, TrainingCurvesAgreeOnAndOff) {
  auto train = [](bool fused) {
    trainer::TrainConfig c;
    c.steps = kSteps;
    c.batch = 8;
    c.seqLen = kSeqLen;
    c.lr = 3e-3;
    c.warmupSteps = 2;
    c.logEvery = 1;
    c.outDir = (fs::temp_directory_path() / ("linac_fused_loss_test_" + std::to_string(::getpid())) /
                (fused ? "on" : "off")).string();
    fs::remove_all(c.outDir);
    torch::manual_seed(5);
    model::HybridLM lm(smallConfig(false));
    auto stream = data::makeMqarStream(kSeqLen, kPairs, kVocab, 5);
    std::vector<double> losses;
    trainer::TrainHooks hooks;
    hooks.onStep = [&](const trainer::StepStats& s) { losses.push_back(s.loss); };
    trainer::Trainer t(c, lm.ptr(), [&](const torch::Tensor& x) { return lm->forward(x); }, *stream, {}, hooks);
    if (fused) t.setLoss([&](const torch::Tensor& x, const torch::Tensor& y) { return lm->loss(x, y); });
    t.setProgressStream(nullptr);
    t.run();
    return losses;
  };
  const std::vector<double> on = train(true), off = train(false);
  ASSERT_EQ(on.size(), size_t(kSteps));
  ASSERT_EQ(off.size(), size_t(kSteps));
  for (int64_t s = 0; s < kSteps; ++s) EXPECT_NEAR(on[s], off[s], 1e-5 * off[s]) << "step " << s + 1;
  EXPECT_LT(on.back(), on.front()) << "the loss falls";
}
