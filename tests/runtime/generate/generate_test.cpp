// Generation with state caches (runtime/model/cache.h, runtime/generate): for every linear spec in
// specs/, pure and 3:1, a prefill of a prefix, a second prefill from the cached state and then
// decode steps give the logits of one full forward over the same tokens (fp32), and so do rows of
// different lengths in one cache; the greedy engine does too, alone and on prompts of different
// lengths; the caches hold exactly the bytes `linac memory` computes; sampling is seeded and
// keeps to the top-p nucleus. GenerateCuda repeats the parity on the GPU (ctest label gpu).
#include "generate/generator.h"
#include "generate/sampling.h"
#include "model/cache_memory.h"
#include "model/model.h"

#include "linac/Spec/SpecParser.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

namespace linac::generate {
namespace {

const std::string kSpecs = LINAC_SPECS_DIR;
// fp32 gates: the chunk kernels and the decode step sum in different orders, nothing else differs.
constexpr double kCpuTolerance = 1e-5;
constexpr double kCudaTolerance = 1e-4;
// Token counts: the first prefill crosses the kernels' chunk of 64, the second starts from a
// non-zero state mid-sequence, then single-token decode steps.
constexpr int64_t kFirstPrefill = 70, kSecondPrefill = 9, kDecodeSteps = 6;
constexpr int64_t kBatch = 2;

model::ModelConfig config(const std::string& linear, const std::string& schedule) {
  model::ModelConfig c;
  c.preset = spec::loadPreset("tiny", kSpecs + "/presets");
  c.linear = spec::loadVariant(kSpecs + "/" + linear + ".yaml");
  c.attention = spec::loadVariant(kSpecs + "/attention.yaml");
  c.schedule = spec::loadSchedule(schedule);
  return c;
}

/// Every linear spec in specs/ (all but attention.yaml), sorted.
std::vector<std::string> linearSpecs() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(kSpecs))
    if (e.path().extension() == ".yaml" && e.path().stem() != "attention") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

double relRms(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor x = a.to(torch::kCPU, torch::kFloat64), y = b.to(torch::kCPU, torch::kFloat64);
  return ((x - y).pow(2).mean().sqrt() / y.pow(2).mean().sqrt()).item<double>();
}

/// Prefill, second prefill, decode steps against one forward over the same tokens on `device`.
void checkCachedParity(const std::string& name, const std::string& schedule, const torch::Device& device,
                       double tolerance) {
  SCOPED_TRACE(name + " " + schedule);
  torch::manual_seed(3);
  const model::ModelConfig c = config(name, schedule);
  model::HybridLM lm(c);
  lm->to(device);
  lm->eval();
  torch::NoGradGuard noGrad;
  const int64_t T = kFirstPrefill + kSecondPrefill + kDecodeSteps;
  torch::Tensor tokens = torch::randint(0, c.preset.vocab, {kBatch, T}, torch::kLong).to(device);
  torch::Tensor full = lm->forward(tokens);  // [B, T, V]
  model::ModelCache cache = lm->makeCache(kBatch, T);
  std::vector<torch::Tensor> parts = {lm->forwardCached(tokens.narrow(1, 0, kFirstPrefill), cache),
                                      lm->forwardCached(tokens.narrow(1, kFirstPrefill, kSecondPrefill), cache)};
  for (int64_t t = kFirstPrefill + kSecondPrefill; t < T; ++t) parts.push_back(lm->forwardCached(tokens.narrow(1, t, 1), cache));
  torch::Tensor cached = torch::cat(parts, 1);  // [B, T, V]
  EXPECT_EQ(cache.position, T);
  const double prefillErr = relRms(cached.narrow(1, 0, kFirstPrefill + kSecondPrefill),
                                   full.narrow(1, 0, kFirstPrefill + kSecondPrefill));
  const double stepErr = relRms(cached.narrow(1, kFirstPrefill + kSecondPrefill, kDecodeSteps),
                                full.narrow(1, kFirstPrefill + kSecondPrefill, kDecodeSteps));
  std::cout << "[ cached vs full ] " << name << " " << schedule << " " << device << ": prefill rel-RMS " << prefillErr
            << ", decode steps rel-RMS " << stepErr << "\n";
  EXPECT_LT(prefillErr, tolerance);
  EXPECT_LT(stepErr, tolerance);
}

TEST(CachedForward, PrefixThenDecodeMatchesFullForward) {
  const auto specs = linearSpecs();
  ASSERT_GE(specs.size(), 9u);
  for (const auto& name : specs)
    for (const char* schedule : {"pure", "3:1"}) checkCachedParity(name, schedule, torch::kCPU, kCpuTolerance);
}

TEST(CachedForward, TransformerMatchesFullForward) {
  checkCachedParity("gla", "transformer", torch::kCPU, kCpuTolerance);
}

// lastOnly: the last position's logits, as the whole prefill gives them (to the LM head's rounding).
TEST(CachedForward, LastOnlyIsTheLastPosition) {
  torch::manual_seed(8);
  model::HybridLM lm(config("gated_deltanet", "3:1"));
  lm->eval();
  torch::NoGradGuard noGrad;
  const torch::Tensor tokens = torch::randint(0, 256, {2, 20}, torch::kLong);
  model::ModelCache all = lm->makeCache(2, 21), last = lm->makeCache(2, 21);
  const torch::Tensor whole = lm->forwardCached(tokens, all), tail = lm->forwardCached(tokens, last, true);
  ASSERT_EQ(tail.sizes(), (std::vector<int64_t>{2, 1, whole.size(2)}));
  EXPECT_LT(relRms(tail, whole.narrow(1, 19, 1)), 1e-6);  // one matmul row against twenty: rounding only
  EXPECT_EQ(last.position, 20);
}

TEST(CachedForward, RefusesOverflowAndAnotherBatch) {
  model::HybridLM lm(config("gla", "3:1"));
  torch::NoGradGuard noGrad;
  model::ModelCache cache = lm->makeCache(1, 4);
  EXPECT_THROW(lm->forwardCached(torch::zeros({1, 5}, torch::kLong), cache), std::invalid_argument);
  EXPECT_THROW(lm->forwardCached(torch::zeros({2, 1}, torch::kLong), cache), std::invalid_argument);
}

// The greedy engine: its tokens are the argmax of a full forward's logits, which equal its own.
TEST(Generate, GreedyMatchesFullForward) {
  for (const auto& name : linearSpecs()) {
    SCOPED_TRACE(name);
    torch::manual_seed(4);
    const model::ModelConfig c = config(name, "3:1");
    model::HybridLM lm(c);
    lm->eval();
    const int64_t T = 12;
    torch::Tensor prompt = torch::randint(0, c.preset.vocab, {kBatch, T}, torch::kLong);
    GenerateOptions options;
    options.maxNew = 8;
    options.keepLogits = true;
    const GenerateResult r = generate(*lm, prompt, options);
    ASSERT_EQ(r.tokens.size(), size_t(kBatch));
    torch::Tensor sequence = prompt.clone();
    for (size_t b = 0; b < r.tokens.size(); ++b) ASSERT_EQ(r.tokens[b].size(), size_t(options.maxNew));
    std::vector<torch::Tensor> cols = {prompt};
    for (int64_t i = 0; i + 1 < options.maxNew; ++i)
      cols.push_back(torch::tensor({r.tokens[0][size_t(i)], r.tokens[1][size_t(i)]}, torch::kLong).view({kBatch, 1}));
    torch::NoGradGuard noGrad;
    torch::Tensor full = lm->forward(torch::cat(cols, 1));  // [B, T + maxNew - 1, V]
    ASSERT_EQ(r.logits.sizes(), full.sizes());
    EXPECT_LT(relRms(r.logits, full), kCpuTolerance);
    torch::Tensor best = full.narrow(1, T - 1, options.maxNew).argmax(-1);  // [B, maxNew]
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t i = 0; i < options.maxNew; ++i) EXPECT_EQ(r.tokens[size_t(b)][size_t(i)], best[b][i].item<int64_t>());
    EXPECT_EQ(r.prefillTokens, kBatch * T);
    EXPECT_EQ(r.decodeTokens, kBatch * (options.maxNew - 1));
    EXPECT_EQ(r.capacity, T + options.maxNew);
    EXPECT_EQ(r.cacheBytes.total(), model::cacheMemory(c, kBatch, r.capacity, torch::kFloat32).total.total());
  }
}

/// Prompts of different lengths in one cache: each row prefilled through its view, then decode
/// steps at each row's own position give the logits of a full forward over that row's tokens.
void checkRaggedParity(const std::string& name, const std::string& schedule, const torch::Device& device,
                       double tolerance) {
  SCOPED_TRACE(name + " " + schedule);
  torch::manual_seed(6);
  const model::ModelConfig c = config(name, schedule);
  model::HybridLM lm(c);
  lm->to(device);
  lm->eval();
  torch::NoGradGuard noGrad;
  const std::vector<int64_t> lengths = {5, 70, 70, 12};  // rows 1 and 2 share one prefill
  const int64_t steps = 4, B = int64_t(lengths.size());
  std::vector<torch::Tensor> rows;  // each row's whole sequence [1, L + steps]
  for (int64_t L : lengths) rows.push_back(torch::randint(0, c.preset.vocab, {1, L + steps}, torch::kLong).to(device));
  model::ModelCache cache = lm->makeCache(B, 70 + steps);
  std::vector<torch::Tensor> prefill(static_cast<size_t>(B));
  for (int64_t start : {0, 1, 3}) {
    const int64_t count = start == 1 ? 2 : 1, L = lengths[size_t(start)];
    std::vector<torch::Tensor> ids;
    for (int64_t r = start; r < start + count; ++r) ids.push_back(rows[size_t(r)].narrow(1, 0, L));
    model::ModelCache view = cache.rows(start, count);
    torch::Tensor logits = lm->forwardCached(torch::cat(ids, 0), view);  // [count, L, V]
    for (int64_t r = start; r < start + count; ++r) prefill[size_t(r)] = logits.narrow(0, r - start, 1);
  }
  cache.setRowLengths(torch::tensor(lengths, torch::kLong).to(device));
  std::vector<torch::Tensor> stepLogits;  // [B, 1, V] per step
  for (int64_t i = 0; i < steps; ++i) {
    std::vector<torch::Tensor> next;
    for (int64_t r = 0; r < B; ++r) next.push_back(rows[size_t(r)].narrow(1, lengths[size_t(r)] + i, 1));
    stepLogits.push_back(lm->forwardCached(torch::cat(next, 0), cache));
  }
  torch::Tensor decoded = torch::cat(stepLogits, 1);  // [B, steps, V]
  for (int64_t r = 0; r < B; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const int64_t L = lengths[size_t(r)];
    torch::Tensor full = lm->forward(rows[size_t(r)]);  // [1, L + steps, V]
    EXPECT_LT(relRms(prefill[size_t(r)], full.narrow(1, 0, L)), tolerance);
    EXPECT_LT(relRms(decoded.narrow(0, r, 1), full.narrow(1, L, steps)), tolerance);
  }
  EXPECT_EQ(cache.position, 70 + steps);
}

TEST(CachedForward, RowsOfDifferentLengthsMatchFullForward) {
  for (const auto& name : linearSpecs()) checkRaggedParity(name, "1:1", torch::kCPU, kCpuTolerance);
  checkRaggedParity("gla", "transformer", torch::kCPU, kCpuTolerance);
}

// The engine on prompts of different lengths: each row's greedy tokens are those it gets alone.
TEST(Generate, PromptsOfDifferentLengthsGenerateAsAlone) {
  torch::manual_seed(7);
  const model::ModelConfig c = config("rwkv6", "1:1");  // token shift, a bonus readout, attention
  model::HybridLM lm(c);
  lm->eval();
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t L : {9, 3, 9, 20}) {
    torch::Tensor ids = torch::randint(0, c.preset.vocab, {L}, torch::kLong);
    prompts.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + L);
  }
  GenerateOptions options;
  options.maxNew = 6;
  const GenerateResult together = generate(*lm, prompts, torch::kCPU, options);
  ASSERT_EQ(together.tokens.size(), prompts.size());
  EXPECT_EQ(together.prefillTokens, 41);
  EXPECT_EQ(together.capacity, 20 + options.maxNew);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerateResult alone = generate(*lm, torch::tensor(prompts[i], torch::kLong).view({1, -1}), options);
    EXPECT_EQ(together.tokens[i], alone.tokens[0]) << "prompt " << i;
  }
  // Prompts of one length (prompts 0 and 2) prefill the cache itself.
  const GenerateResult same = generate(*lm, std::vector<std::vector<int64_t>>{prompts[0], prompts[2]}, torch::kCPU, options);
  EXPECT_EQ(same.tokens[0], together.tokens[0]);
  EXPECT_EQ(same.tokens[1], together.tokens[2]);
}

TEST(Generate, StopsAtTheStopId) {
  torch::manual_seed(5);
  const model::ModelConfig c = config("gated_deltanet", "3:1");
  model::HybridLM lm(c);
  lm->eval();
  torch::Tensor prompt = torch::randint(0, c.preset.vocab, {1, 5}, torch::kLong);
  GenerateOptions options;
  options.maxNew = 6;
  const GenerateResult free = generate(*lm, prompt, options);
  options.stop = free.tokens[0][2];  // the third greedy token ends it (or an earlier equal one)
  const GenerateResult stopped = generate(*lm, prompt, options);
  const auto end = std::find(free.tokens[0].begin(), free.tokens[0].end(), *options.stop);
  EXPECT_EQ(stopped.tokens[0], std::vector<int64_t>(free.tokens[0].begin(), end));
  EXPECT_LT(stopped.decodeTokens, free.decodeTokens);
}

// The arithmetic of `linac memory` equals the bytes the caches' tensors hold, before and after
// generation (they are updated in place), for every spec and schedule, fp32 and bf16 models.
TEST(CacheMemory, ArithmeticEqualsCacheBytes) {
  const int64_t batch = 3, capacity = 33;
  for (const auto& name : linearSpecs()) {
    for (const char* schedule : {"pure", "3:1", "transformer"}) {
      SCOPED_TRACE(name + " " + schedule);
      const model::ModelConfig c = config(name, schedule);
      model::HybridLM lm(c);
      lm->eval();
      for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
        lm->to(dtype);
        const model::CacheMemory expected = model::cacheMemory(c, batch, capacity, dtype);
        model::ModelCache cache = lm->makeCache(batch, capacity);
        const std::vector<model::CacheBytes> held = cache.layerBytes();
        ASSERT_EQ(held.size(), expected.layers.size());
        for (size_t i = 0; i < held.size(); ++i) {
          EXPECT_EQ(held[i].state, expected.layers[i].bytes.state) << "layer " << i;
          EXPECT_EQ(held[i].conv, expected.layers[i].bytes.conv) << "layer " << i;
          EXPECT_EQ(held[i].shift, expected.layers[i].bytes.shift) << "layer " << i;
          EXPECT_EQ(held[i].kv, expected.layers[i].bytes.kv) << "layer " << i;
        }
        EXPECT_GT(expected.total.total(), 0);
        if (dtype == torch::kFloat32) {  // the kernels' CPU paths run fp32 here
          torch::NoGradGuard noGrad;
          lm->forwardCached(torch::zeros({batch, 5}, torch::kLong), cache);
          lm->forwardCached(torch::zeros({batch, 1}, torch::kLong), cache);
          EXPECT_EQ(cache.bytes().total(), expected.total.total());
        }
      }
    }
  }
}

// Only the attention layers grow with the context; the transformer's cache is all KV.
TEST(CacheMemory, OnlyAttentionGrowsWithContext) {
  const model::ModelConfig c = config("gated_deltanet", "3:1");
  const model::CacheMemory short_ = model::cacheMemory(c, 1, 1024, torch::kBFloat16);
  const model::CacheMemory long_ = model::cacheMemory(c, 1, 2048, torch::kBFloat16);
  EXPECT_EQ(long_.total.state, short_.total.state);
  EXPECT_EQ(long_.total.conv, short_.total.conv);
  EXPECT_EQ(long_.total.kv, 2 * short_.total.kv);
  // tiny: 1 attention layer of 4 heads x 32 dims; keys and values in bf16
  EXPECT_EQ(short_.total.kv, 2 * 1024 * 4 * 32 * 2);
  // gated_deltanet at hidden 128: 4 heads, dk 32, dv 64, fp32 state; convs of width 4 on q, k, v
  EXPECT_EQ(short_.layers[0].bytes.state, 4 * 32 * 64 * 4);
  EXPECT_EQ(short_.layers[0].bytes.conv, 3 * (128 + 128 + 256) * 2);
}

TEST(Sampling, GreedyTopPAndSeeds) {
  torch::Tensor logits = torch::log(torch::tensor({{0.40, 0.35, 0.25}}, torch::kFloat32)).repeat({4000, 1});
  SamplingOptions greedy;
  at::Generator g0 = makeGenerator(greedy);
  EXPECT_TRUE((sampleNext(logits, greedy, g0) == 0).all().item<bool>());
  SamplingOptions nucleus;
  nucleus.temperature = 1.0;
  nucleus.topP = 0.7;  // 0.40 + 0.35 reach it: the 0.25 token is never drawn
  nucleus.seed = 9;
  at::Generator g1 = makeGenerator(nucleus), g2 = makeGenerator(nucleus);
  torch::Tensor a = sampleNext(logits, nucleus, g1), b = sampleNext(logits, nucleus, g2);
  EXPECT_TRUE(torch::equal(a, b));  // the same seed draws the same tokens
  EXPECT_EQ((a == 2).sum().item<int64_t>(), 0);
  const double share0 = (a == 0).to(torch::kFloat64).mean().item<double>();
  EXPECT_NEAR(share0, 0.40 / 0.75, 0.05);  // renormalised over the nucleus
  nucleus.seed = 10;
  at::Generator g3 = makeGenerator(nucleus);
  EXPECT_FALSE(torch::equal(a, sampleNext(logits, nucleus, g3)));
  SamplingOptions bad;
  bad.topP = 0.0;
  EXPECT_THROW(checkSampling(bad), std::invalid_argument);
  bad.topP = 1.0, bad.temperature = -1.0;
  EXPECT_THROW(checkSampling(bad), std::invalid_argument);
}

// On the GPU (ctest label gpu): the same parity with the CUDA kernels (fused prefill, decode step).
TEST(GenerateCuda, PrefixThenDecodeMatchesFullForward) {
  ASSERT_TRUE(torch::cuda::is_available()) << "GenerateCuda needs a GPU";
  for (const auto& name : linearSpecs())
    for (const char* schedule : {"pure", "3:1"})
      checkCachedParity(name, schedule, torch::Device(torch::kCUDA, 0), kCudaTolerance);
}

TEST(GenerateCuda, RowsOfDifferentLengthsMatchFullForward) {
  ASSERT_TRUE(torch::cuda::is_available()) << "GenerateCuda needs a GPU";
  for (const auto& name : linearSpecs()) checkRaggedParity(name, "1:1", torch::Device(torch::kCUDA, 0), kCudaTolerance);
}

}  // namespace
}  // namespace linac::generate
