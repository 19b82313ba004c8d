// Activation checkpointing (model/checkpoint.h, `linac train --checkpointing`) against the plain
// path: a function drawing random numbers (dropout), and the loss and every parameter gradient of
// small hybrids (a linear spec 3:1 with full attention). Then the step profile
// (trainer/step_profile.h) of a few steps through the real Trainer: its trace, and a nonzero
// total for every category the model has.
#include "data/data.h"
#include "linac/Spec/SpecParser.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "trainer/file_io.h"
#include "trainer/step_profile.h"
#include "trainer/trainer.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include <unistd.h>

using namespace linac;
// Files through trainer/file_io.h: std::filesystem clashes with the PyPI LibTorch's copy of it.
namespace io = linac::trainer::detail;

namespace {

const std::string kSpecs = LINAC_SPECS_DIR;
constexpr int64_t kVocab = 48, kSeqLen = 16, kBatch = 2;

/// A 4-layer hybrid, schedule 3:1: three `linear` layers and one full-attention layer.
model::ModelConfig hybridConfig(const std::string& linear) {
  model::ModelConfig c;
  c.preset = spec::loadPreset("tiny", kSpecs + "/presets");
  c.preset.hidden = 32;
  c.preset.layers = 4;
  c.preset.attnHeads = 2;
  c.preset.vocab = kVocab;
  c.preset.intermediate = 64;
  c.linear = spec::loadVariant(kSpecs + "/" + linear + ".yaml");
  c.attention = spec::loadVariant(kSpecs + "/attention.yaml");
  c.schedule = spec::loadSchedule("3:1");
  return c;
}

double maxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

/// The loss (fused path, or the logits' cross-entropy) and each parameter's gradient.
std::pair<torch::Tensor, std::vector<torch::Tensor>> lossAndGrads(model::HybridLM& lm, const torch::Tensor& tokens,
                                                                  const torch::Tensor& targets, bool fused) {
  for (auto& p : lm->parameters()) p.mutable_grad() = torch::Tensor();
  torch::Tensor loss = fused ? lm->loss(tokens, targets)
                             : torch::nn::functional::cross_entropy(lm->forward(tokens).reshape({-1, kVocab}),
                                                                    targets.reshape({-1}));
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : lm->parameters()) grads.push_back(p.grad().clone());
  return {loss.detach(), grads};
}

}  // namespace

TEST(Checkpoint, RecomputesFromTheForwardsRandomState) {
  torch::manual_seed(3);
  torch::Tensor w = torch::randn({8, 8}, torch::requires_grad());  // [8, 8]
  torch::Tensor x0 = torch::randn({4, 8});                          // [4, 8]
  auto fn = [&](const torch::Tensor& x) {
    return torch::dropout(torch::tanh(torch::linear(x, w)), 0.5, /*train=*/true).sum(-1, true) * x;
  };
  auto run = [&](bool checkpoint) {
    torch::manual_seed(11);
    torch::Tensor x = x0.clone().requires_grad_(true);
    w.mutable_grad() = torch::Tensor();
    torch::Tensor y = checkpoint ? model::checkpointed(fn, x, {w}) : fn(x);  // [4, 8]
    y.pow(2).sum().backward();
    torch::Tensor after = torch::rand({4});  // the draws after backward: as without checkpointing
    return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad(), after};
  };
  const auto plain = run(false), checkpointed = run(true);
  const char* names[] = {"output", "input gradient", "weight gradient", "draws after backward"};
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], checkpointed[i])) << names[i];
}

TEST(Checkpoint, KeepsNoActivationsOfTheBlock) {
  torch::Tensor w = torch::randn({8, 8}, torch::requires_grad());
  torch::Tensor x = torch::randn({4, 8}, torch::requires_grad());
  torch::Tensor y = model::checkpointed([&](const torch::Tensor& t) { return torch::tanh(torch::linear(t, w)); }, x, {w});
  ASSERT_TRUE(y.grad_fn());
  // One node for the whole function, whose inputs are x and w themselves (no graph inside).
  EXPECT_EQ(y.grad_fn()->next_edges().size(), 2u);
  for (const auto& edge : y.grad_fn()->next_edges()) EXPECT_EQ(edge.function->name(), "torch::autograd::AccumulateGrad");
  torch::NoGradGuard noGrad;  // without gradients: fn(x), no node
  EXPECT_FALSE(model::checkpointed([&](const torch::Tensor& t) { return torch::linear(t, w); }, x, {w}).grad_fn());
}

TEST(Checkpointing, HybridLossAndGradientsEqualThePlainPath) {
  for (const std::string linear : {"gated_deltanet", "gla"}) {
    for (bool fused : {true, false}) {
      torch::manual_seed(1);
      model::HybridLM lm(hybridConfig(linear));
      torch::Tensor tokens = torch::randint(0, kVocab, {kBatch, kSeqLen}, torch::kInt64);   // [B, T]
      torch::Tensor targets = torch::randint(0, kVocab, {kBatch, kSeqLen}, torch::kInt64);  // [B, T]
      const auto [plainLoss, plainGrads] = lossAndGrads(lm, tokens, targets, fused);
      lm->setCheckpointing(true);
      const auto [loss, grads] = lossAndGrads(lm, tokens, targets, fused);
      lm->setCheckpointing(false);
      const std::string what = linear + (fused ? " fused loss" : " logits loss");
      EXPECT_EQ(loss.item<float>(), plainLoss.item<float>()) << what;
      const auto params = lm->named_parameters();
      for (size_t i = 0; i < params.size(); ++i)
        EXPECT_LE(maxAbsDiff(grads[i], plainGrads[i]), 1e-6) << what << ": " << params[i].key();
    }
  }
}

TEST(StepProfile, TinyProfileHasEveryPartOfTheModel) {
  trainer::TrainConfig c;
  c.profileSteps = 3;
  c.steps = trainer::kProfileWarmupSteps + c.profileSteps;
  c.batch = kBatch;
  c.seqLen = kSeqLen;
  c.warmupSteps = 1;
  c.logEvery = 1;
  c.outDir = "/tmp/linac_step_profile_test_" + std::to_string(::getpid());
  io::removeTree(c.outDir);
  torch::manual_seed(5);
  model::HybridLM lm(hybridConfig("gated_deltanet"));  // short convolutions, a fused plan, attention
  auto stream = data::makeMqarStream(kSeqLen, 2, kVocab, 5);
  trainer::Trainer t(c, lm.ptr(), [&](const torch::Tensor& x) { return lm->forward(x); }, *stream);
  t.setLoss([&](const torch::Tensor& x, const torch::Tensor& y) { return lm->loss(x, y); });
  std::ostringstream progress;
  t.setProgressStream(&progress);
  t.run();

  const std::optional<std::string> trace = io::readFileIfExists(c.outDir + "/profile/trace.json");
  ASSERT_TRUE(trace.has_value());
  EXPECT_NE(trace->find("linac::mixer_kernel"), std::string::npos) << "the scopes are in the trace";
  std::istringstream in(io::readFileIfExists(c.outDir + "/profile/table.txt").value_or(""));
  std::map<std::string, double> hostMs;  // "category  host ms/step  share" rows
  for (std::string line; std::getline(in, line);) {
    std::istringstream row(line);
    std::string name;
    double ms = 0;
    if (row >> name >> ms) hostMs.emplace(name, ms);
  }
  for (const char* category : {"mixer_kernel", "prologue_epilogue", "short_conv", "projections", "attention", "mlp",
                                "norm", "embedding", "lm_head_loss", "optimizer", "other", "total"}) {
    ASSERT_TRUE(hostMs.count(category)) << category << " missing from\n" << progress.str();
    EXPECT_GT(hostMs[category], 0.0) << category;
  }
  EXPECT_NE(progress.str().find("top ops by self host time"), std::string::npos) << progress.str();
  const std::string lines = io::readFileIfExists(c.outDir + "/metrics.jsonl").value_or("");
  EXPECT_NE(lines.find("\"step\":5,"), std::string::npos) << lines;
  EXPECT_EQ(lines.find("peak_allocated_bytes"), std::string::npos) << "no device memory on the CPU";
  io::removeTree(c.outDir);
}
