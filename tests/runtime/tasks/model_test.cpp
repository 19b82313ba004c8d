// The full-forward LanguageModel: generation and continuation scores on a toy forward whose
// answers are known, padding invisible to a real HybridLM (batched == one at a time); the cached
// LanguageModel generating what the full-forward one does; RULER and the zero-shot samples end to
// end on a small random HybridLM on the CPU.
#include "tasks/cached_model.h"
#include "tasks/language_model.h"
#include "tasks/report.h"
#include "tasks/ruler_run.h"
#include "tasks/zero_shot.h"
#include "test_support.h"

#include "linac/Spec/SpecParser.h"
#include "model/model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace linac::tasks {
namespace {

constexpr int64_t kToyVocab = 16;
constexpr double kToyLogit = 10.0;

/// Predicts (token + 1) mod 16 at every position with logit 10 (0 elsewhere).
torch::Tensor toyForward(const torch::Tensor& tokens) {
  return torch::one_hot((tokens + 1) % kToyVocab, kToyVocab).to(torch::kFloat32) * kToyLogit;
}

TEST(FullForwardModel, GeneratesGreedilyPerPromptAcrossPaddedBatches) {
  FullForwardOptions tiny;
  tiny.batch = 2;
  tiny.maxLogitElements = 1;  // forces one sequence per forward
  for (FullForwardOptions options : {FullForwardOptions{}, tiny}) {
    auto model = makeFullForwardModel(toyForward, torch::kCPU, options);
    const std::vector<TokenIds> prompts{{3}, {5, 6, 7}, {1, 2}};
    EXPECT_EQ(model->generate(prompts, 4, std::nullopt),
              (std::vector<TokenIds>{{4, 5, 6, 7}, {8, 9, 10, 11}, {3, 4, 5, 6}}));
    // Stopping at 9: the second prompt ends before it, the others never produce it in 4 steps.
    EXPECT_EQ(model->generate(prompts, 4, 9), (std::vector<TokenIds>{{4, 5, 6, 7}, {8}, {3, 4, 5, 6}}));
    EXPECT_EQ(model->generate(prompts, 0, std::nullopt), (std::vector<TokenIds>{{}, {}, {}}));
  }
  EXPECT_THROW(makeFullForwardModel(toyForward, torch::kCPU)->generate({{}}, 1, std::nullopt), std::invalid_argument);
}

TEST(FullForwardModel, ScoresContinuationsTokenByToken) {
  FullForwardOptions options;
  options.maxLength = 3;
  auto model = makeFullForwardModel(toyForward, torch::kCPU, options);
  const double hit = kToyLogit - std::log(std::exp(kToyLogit) + double(kToyVocab - 1));
  const double miss = -std::log(std::exp(kToyLogit) + double(kToyVocab - 1));
  // The second request is longer than maxLength: truncated on the left, same scores (the toy
  // looks at one token only).
  const auto scores = model->score({{{3}, {4, 5}}, {{1, 2, 3, 4, 5}, {6, 8}}});
  ASSERT_EQ(scores.size(), 2u);
  ASSERT_EQ(scores[0].logProbs.size(), 2u);
  EXPECT_NEAR(scores[0].logProbs[0], hit, 1e-5);
  EXPECT_NEAR(scores[0].total(), 2 * hit, 1e-5);
  EXPECT_TRUE(scores[0].allGreedy());
  EXPECT_NEAR(scores[1].logProbs[0], hit, 1e-5);
  EXPECT_NEAR(scores[1].logProbs[1], miss, 1e-5);
  EXPECT_EQ(scores[1].greedy, (std::vector<bool>{true, false}));
  EXPECT_FALSE(scores[1].allGreedy());
  EXPECT_THROW(model->score({{{1}, {2, 3, 4, 5}}}), std::invalid_argument);  // continuation > maxLength
  EXPECT_THROW(model->score({{{}, {2}}}), std::invalid_argument);
}

model::HybridLM smallModel() {
  const std::string specs = LINAC_SPECS_DIR;
  model::ModelConfig c;
  c.preset = spec::loadPreset("tiny", specs + "/presets");
  c.preset.hidden = 64;
  c.preset.layers = 2;
  c.preset.attnHeads = 2;
  c.preset.intermediate = 128;
  c.linear = spec::loadVariant(specs + "/gated_deltanet.yaml");
  c.attention = spec::loadVariant(specs + "/attention.yaml");
  c.schedule = spec::loadSchedule("1:1");
  torch::manual_seed(3);
  model::HybridLM lm(c);
  lm->eval();
  return lm;
}

TEST(FullForwardModel, PaddingIsInvisibleToAHybridModel) {
  model::HybridLM lm = smallModel();
  auto model = makeFullForwardModel([&](const torch::Tensor& t) { return lm->forward(t); }, torch::kCPU);
  const std::vector<TokenIds> prompts{{0, 72, 105, 32, 116, 104, 101, 114, 101}, {0, 65}, {0, 66, 67, 68, 69}};
  const std::vector<TokenIds> together = model->generate(prompts, 6, std::nullopt);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(model->generate({prompts[i]}, 6, std::nullopt)[0], together[i]);

  const std::vector<ContinuationRequest> requests{{{0, 1, 2, 3, 4, 5, 6}, {7, 8}}, {{0, 9}, {10, 11, 12}}};
  const auto batched = model->score(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto alone = model->score({requests[i]})[0];
    ASSERT_EQ(alone.logProbs.size(), batched[i].logProbs.size());
    for (size_t t = 0; t < alone.logProbs.size(); ++t) EXPECT_NEAR(alone.logProbs[t], batched[i].logProbs[t], 1e-4);
  }
}

TEST(CachedModel, GeneratesWhatTheFullForwardModelGenerates) {
  // A Gated DeltaNet 1:1 hybrid: both the recurrent state and the KV cache are exercised.
  model::HybridLM lm = smallModel();
  auto full = makeFullForwardModel([&](const torch::Tensor& t) { return lm->forward(t); }, torch::kCPU);
  FullForwardOptions options;
  options.batch = 2;  // three prompts of length 5: a batch of two and one alone
  auto cached = makeCachedModel(*lm, torch::kCPU, options);
  const std::vector<TokenIds> prompts{
      {0, 72, 105, 32, 116}, {0, 72, 105, 32, 116, 104, 101, 114, 101}, {0, 66, 67, 68, 69}, {0, 65}, {0, 7, 8, 9, 10}};
  const std::vector<TokenIds> want = full->generate(prompts, 8, std::nullopt);
  EXPECT_EQ(cached->generate(prompts, 8, std::nullopt), want);
  // Stopping at the third token the second prompt produces: it ends there, others may too.
  const int64_t stop = want[1][2];
  EXPECT_EQ(cached->generate(prompts, 8, stop), full->generate(prompts, 8, stop));
  EXPECT_EQ(cached->generate(prompts, 0, std::nullopt), (std::vector<TokenIds>(prompts.size())));
  EXPECT_THROW(cached->generate({{}}, 1, std::nullopt), std::invalid_argument);

  const std::vector<ContinuationRequest> requests{{{0, 1, 2, 3, 4, 5, 6}, {7, 8}}, {{0, 9}, {10, 11, 12}}};
  const auto a = cached->score(requests), b = full->score(requests);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(a[i].logProbs, b[i].logProbs);
}

TEST(EndToEnd, RulerAndZeroShotOnASmallRandomModel) {
  model::HybridLM lm = smallModel();
  FullForwardOptions options;
  options.maxLength = 512;
  auto model = makeCachedModel(*lm, torch::kCPU, options);  // as `linac eval` runs the tasks
  auto tok = data::makeByteTokenizer();
  const RulerSetup setup = testing::byteSetup(*tok);

  RulerOptions ruler;
  ruler.tasks = {"fwe"};  // the shortest generation (50 tokens) among those that fit 1024 bytes
  ruler.contexts = {1024};
  ruler.examples = 2;
  ruler.batch = 2;
  const std::vector<RulerScore> scores = runRuler(*model, setup, ruler);
  ASSERT_EQ(scores.size(), 1u);
  for (const RulerScore& s : scores) {
    EXPECT_EQ(s.examples, 2) << s.task;
    EXPECT_GE(s.score, 0.0);
    EXPECT_LE(s.score, 100.0);
  }

  std::vector<nlohmann::ordered_json> lines = rulerJson(scores);
  const std::string samples = LINAC_TASK_SAMPLES_DIR;
  for (const std::string name : {"arc_easy", "winogrande", "lambada_openai"}) {
    const ZeroShotResult r = runZeroShot(*model, *tok, loadZeroShotTask(samples + "/" + name + ".jsonl", name), {});
    EXPECT_GE(r.acc, 0.0);
    EXPECT_LE(r.acc, 1.0);
    if (r.perplexity) EXPECT_GT(*r.perplexity, 1.0);  // a random byte model is far from certain
    lines.push_back(zeroShotJson(r));
  }
  testing::TempDir dir;
  appendJsonLines(dir.str() + "/eval.jsonl", lines);
  std::ifstream in(dir.str() + "/eval.jsonl");
  std::string line;
  int64_t count = 0;
  while (std::getline(in, line)) {
    EXPECT_TRUE(nlohmann::json::parse(line).contains("task")) << line;
    ++count;
  }
  EXPECT_EQ(count, int64_t(lines.size()));
}

}  // namespace
}  // namespace linac::tasks
