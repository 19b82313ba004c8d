// Packed documents kept apart (model/documents.h, `linac train --varlen`): the document layout of
// a batch, and a model given it computes each document's logits, loss and gradients as if the
// document were alone, for every linear spec in a hybrid with attention (recurrence from a zero
// state, short conv, token shift, input and attention RoPE restarting at each document).
#include "model/documents.h"
#include "model/model.h"

#include "linac/Spec/SpecParser.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <utility>
#include <vector>

namespace linac::model {
namespace {

const std::string kSpecs = LINAC_SPECS_DIR;
constexpr int64_t kSeparator = 7;

ModelConfig config(const std::string& linear, MixerBackend backend = MixerBackend::Kernels) {
  ModelConfig c;
  c.preset = spec::loadPreset("tiny", kSpecs + "/presets");
  c.linear = spec::loadVariant(kSpecs + "/" + linear + ".yaml");
  c.attention = spec::loadVariant(kSpecs + "/attention.yaml");
  c.schedule = spec::loadSchedule("1:1");  // linear and attention layers alternate
  c.backend = backend;
  return c;
}

std::vector<std::string> linearSpecs() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(kSpecs))
    if (e.path().extension() == ".yaml" && e.path().stem() != "attention") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// Two rows of random ids without the separator, then separators ending documents at chosen
/// places: row 0 holds documents of 10, 15 and 15 tokens, row 1 of 31 and 8, and a last one of a
/// single token (a separator ends the row's second-to-last token).
torch::Tensor packedTokens(int64_t vocab) {
  torch::Tensor tokens = torch::randint(kSeparator + 1, vocab, {2, 40}, torch::kLong);
  for (auto [row, t] : std::vector<std::pair<int64_t, int64_t>>{{0, 9}, {0, 24}, {1, 30}, {1, 38}})
    tokens[row][t] = kSeparator;
  return tokens;
}

/// Every document of `tokens` as (row, start, length), from its Documents.
std::vector<std::array<int64_t, 3>> spans(const Documents& d, int64_t T) {
  std::vector<std::array<int64_t, 3>> out;
  const torch::Tensor cu = d.cuSeqlens.to(torch::kCPU);
  for (int64_t n = 0; n + 1 < cu.numel(); ++n) {
    const int64_t start = cu[n].item<int64_t>(), end = cu[n + 1].item<int64_t>();
    out.push_back({start / T, start % T, end - start});
  }
  return out;
}

TEST(Documents, LayoutOfASmallBatch) {
  const torch::Tensor tokens = torch::tensor({5, 7, 3, 7, 4, 7, 1, 2, 7, 7}, torch::kLong).view({2, 5});
  const Documents d = documentsEndingWith(tokens, kSeparator);
  // Row 0: [5 7] [3 7] [4]; row 1: [7] [1 2 7] [7] (a row always starts a document).
  EXPECT_TRUE(torch::equal(d.positions, torch::tensor({0, 1, 0, 1, 0, 0, 0, 1, 2, 0}, torch::kLong).view({2, 5})))
      << d.positions;
  EXPECT_TRUE(torch::equal(d.ids, torch::tensor({0, 0, 1, 1, 2, 3, 4, 4, 4, 5}, torch::kLong).view({2, 5}))) << d.ids;
  EXPECT_TRUE(torch::equal(d.cuSeqlens, torch::tensor({0, 2, 4, 5, 6, 9, 10}, torch::kLong))) << d.cuSeqlens;
}

/// Each document's logits in the packed forward against the document alone, on `device`.
void expectEachDocumentAlone(const torch::Device& device, double rtol, double atol) {
  for (const auto& name : linearSpecs()) {
    SCOPED_TRACE(name);
    torch::manual_seed(3);
    const ModelConfig c = config(name);
    HybridLM m(c);
    m->to(device);
    torch::NoGradGuard noGrad;
    const torch::Tensor tokens = packedTokens(c.preset.vocab).to(device);
    const Documents d = documentsEndingWith(tokens, kSeparator);
    const torch::Tensor packed = m->forward(tokens, &d);  // [2, 40, vocab]
    const auto docs = spans(d, tokens.size(1));
    ASSERT_EQ(docs.size(), 6u);
    for (const auto& [row, start, length] : docs) {
      SCOPED_TRACE("row " + std::to_string(row) + " start " + std::to_string(start));
      const torch::Tensor alone = m->forward(tokens[row].narrow(0, start, length).unsqueeze(0))[0];
      EXPECT_TRUE(torch::allclose(packed[row].narrow(0, start, length), alone, rtol, atol));
    }
    // Without the documents the later ones see the earlier: the logits differ.
    EXPECT_FALSE(torch::allclose(m->forward(tokens), packed, rtol, atol));
  }
}

TEST(Documents, EveryLinearSpecComputesEachDocumentAlone) { expectEachDocumentAlone(torch::kCPU, 1e-4, 1e-5); }

// The same on the GPU (label gpu): the recurrence with cu_seqlens through the CUDA kernels, the
// attention mask through SDPA's CUDA kernels; fp32 (the kernels sum in other orders than the CPU).
TEST(DocumentsCuda, EveryLinearSpecComputesEachDocumentAlone) {
  ASSERT_TRUE(torch::cuda::is_available()) << "DocumentsCuda needs a GPU";
  expectEachDocumentAlone(torch::Device(torch::kCUDA, 0), 1e-3, 1e-4);
}

/// The packed loss over all tokens, and each parameter's gradient, against the documents' own
/// losses weighted by their token counts; with checkpointing the same.
void expectLossAndGradientsOfTheDocumentsAlone(const std::string& linear, MixerBackend backend, bool checkpointing) {
  torch::manual_seed(5);
  const ModelConfig c = config(linear, backend);
  HybridLM m(c);
  m->setCheckpointing(checkpointing);
  const torch::Tensor tokens = packedTokens(c.preset.vocab);
  const torch::Tensor targets = torch::randint(kSeparator + 1, 40, tokens.sizes(), torch::kLong);
  const Documents d = documentsEndingWith(tokens, kSeparator);

  m->zero_grad();
  m->loss(tokens, targets, &d).backward();
  std::vector<torch::Tensor> packedGrads;
  for (const auto& p : m->parameters()) packedGrads.push_back(p.grad().clone());

  m->zero_grad();
  torch::Tensor total = torch::zeros({}, torch::kFloat64);
  double packedLoss = 0;
  {
    torch::NoGradGuard noGrad;
    packedLoss = m->loss(tokens, targets, &d).item<double>();
  }
  for (const auto& [row, start, length] : spans(d, tokens.size(1))) {
    torch::Tensor l = m->loss(tokens[row].narrow(0, start, length).unsqueeze(0),
                              targets[row].narrow(0, start, length).unsqueeze(0));
    (l * double(length) / double(tokens.numel())).backward();
    total += l.detach().to(torch::kFloat64) * double(length);
  }
  EXPECT_NEAR(packedLoss, total.item<double>() / double(tokens.numel()), 1e-5);
  const auto params = m->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(torch::allclose(packedGrads[i], params[i].grad(), 1e-3, 1e-6)) << "parameter " << i;
}

TEST(Documents, LossAndGradientsOfTheDocumentsAlone) {
  expectLossAndGradientsOfTheDocumentsAlone("gated_deltanet", MixerBackend::Kernels, false);
  expectLossAndGradientsOfTheDocumentsAlone("rwkv6", MixerBackend::Kernels, true);
  expectLossAndGradientsOfTheDocumentsAlone("hgrn", MixerBackend::Oracle, false);
}

}  // namespace
}  // namespace linac::model
