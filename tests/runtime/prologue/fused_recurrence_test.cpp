// prologue::fusedRecurrence: the fused plans the emitter wrote for the committed variants, and the
// composed path (what runs on the CPU) against the same roles written out with torch ops.
#include "ops/recurrence_ops.h"
#include "prologue/fused_recurrence.h"
#include "registry/registry.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace linac::prologue {
namespace {

const runtime::VariantKernels& variant(const std::string& name) {
  const runtime::VariantKernels* v = runtime::Registry::find(name);
  if (!v) throw std::runtime_error("variant '" + name + "' is not linked in");
  return *v;
}

TEST(FusedPlan, GeneratedPlansNameTilesNormsAndComputedRoles) {
  const runtime::FusedPlan& gdn = variant("gated_deltanet").fused;
  EXPECT_TRUE(gdn.available);
  EXPECT_EQ(gdn.qTile, "q");
  EXPECT_EQ(gdn.kTile, "k");
  EXPECT_EQ(gdn.vTile, "v");
  EXPECT_TRUE(gdn.normQ && gdn.normK);  // l2norm inputs read by nothing else

  const runtime::FusedPlan& hgrn2 = variant("hgrn2").fused;  // tied keys k = 1 - f
  EXPECT_TRUE(hgrn2.available);
  EXPECT_EQ(hgrn2.qTile, "q");
  EXPECT_EQ(hgrn2.kTile, "");
  EXPECT_FALSE(hgrn2.normQ);

  const runtime::FusedPlan& mamba2 = variant("mamba2").fused;  // k = dt * B, q = C, v = x
  EXPECT_EQ(mamba2.qTile, "C");
  EXPECT_EQ(mamba2.kTile, "");
  EXPECT_EQ(mamba2.vTile, "x");

  EXPECT_EQ(variant("rwkv6").fused.bonus, "u");
  EXPECT_FALSE(variant("retnet").fused.normQ);  // no l2norm (RoPE'd q, k)
  EXPECT_FALSE(variant("hgrn").fused.available);  // vector state
}

constexpr int64_t B = 2, T = 37, H = 2, DK = 16, DV = 24;

torch::Tensor leaf(std::vector<int64_t> shape) {
  return torch::randn(shape, torch::kFloat64).to(torch::kFloat32).requires_grad_(true);
}

TEST(FusedRecurrence, ComposedGatedDeltaNetMatchesTheRolesWrittenInTorch) {
  torch::manual_seed(7);
  Operands ops{{"q", leaf({B, T, H, DK})},       {"k", leaf({B, T, H, DK})},
               {"v", leaf({B, T, H, DV})},       {"a", leaf({B, T, H, 1})},
               {"b", leaf({B, T, H, 1})},        {"A_log", leaf({1, 1, H, 1})},
               {"dt_bias", leaf({1, 1, H, 1})}};
  FusedOptions opt;
  opt.keyDim = DK;
  opt.scale = 0.25;
  opt.chunk = 16;
  EXPECT_FALSE(runsInKernel(variant("gated_deltanet"), ops, opt));  // CPU tensors: composed
  torch::Tensor o = fusedRecurrence(variant("gated_deltanet"), ops, opt).first;  // [B, T, H, DV]

  // The same recurrence with its roles written out: the spec's decay and beta, q / k L2-normalised
  // with the kernels' epsilon.
  auto unit = [](const torch::Tensor& x) { return x / torch::sqrt(x.pow(2).sum(-1, true) + 1e-6); };
  Operands ref;
  for (const auto& [name, t] : ops) ref[name] = t.detach().clone().requires_grad_(true);
  torch::Tensor g = (-torch::exp(ref["A_log"]) * torch::softplus(ref["a"] + ref["dt_bias"])).squeeze(-1);
  torch::Tensor beta = torch::sigmoid(ref["b"]).squeeze(-1);
  ops::RecurrenceOptions ro{variant("gated_deltanet").kind, 0.25, 16, false};
  torch::Tensor oRef =
      ops::recurrence({unit(ref["q"]), unit(ref["k"]), ref["v"], g, beta, {}, {}, {}}, ro).first;
  EXPECT_TRUE(torch::allclose(o, oRef, 1e-5, 1e-5)) << (o - oRef).abs().max().item<double>();

  torch::Tensor dO = torch::randn_like(o);
  (o * dO).sum().backward();
  (oRef * dO).sum().backward();
  for (const auto& [name, t] : ops) {
    ASSERT_TRUE(t.grad().defined()) << name;
    EXPECT_TRUE(torch::allclose(t.grad(), ref[name].grad(), 1e-4, 1e-5))
        << name << ": " << (t.grad() - ref[name].grad()).abs().max().item<double>();
  }
}

TEST(FusedRecurrence, ComposedHgrn2ComputesItsTiedKeys) {
  torch::manual_seed(8);
  const double layer = 1.0, numLayers = 4.0;
  Operands ops{{"q", leaf({B, T, H, DK})},
               {"fx", leaf({B, T, H, DK})},
               {"v", leaf({B, T, H, DV})},
               {"layer", torch::full({1, 1, 1, 1}, layer)},
               {"num_layers", torch::full({1, 1, 1, 1}, numLayers)}};
  FusedOptions opt;
  opt.keyDim = DK;
  opt.scale = 1.0;
  opt.outputFinalState = true;
  auto [o, ht] = fusedRecurrence(variant("hgrn2"), ops, opt);

  const double lb = layer / numLayers;
  torch::Tensor f = lb + (1 - lb) * torch::sigmoid(ops["fx"]);
  ops::RecurrenceOptions ro{variant("hgrn2").kind, 1.0, 64, true};
  auto [oRef, htRef] = ops::recurrence({ops["q"], 1 - f, ops["v"], torch::log(f), {}, {}, {}, {}}, ro);
  EXPECT_TRUE(torch::allclose(o, oRef, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(ht, htRef, 1e-5, 1e-5));
}

TEST(FusedRecurrence, MissingOperandsAndUnfusedVariantsThrow) {
  Operands ops{{"q", torch::randn({B, T, H, DK})}, {"k", torch::randn({B, T, H, DK})},
               {"v", torch::randn({B, T, H, DV})}, {"b", torch::randn({B, T, H, 1})},
               {"A_log", torch::randn({1, 1, H, 1})}, {"dt_bias", torch::randn({1, 1, H, 1})}};
  FusedOptions opt;
  opt.keyDim = DK;
  try {
    fusedRecurrence(variant("gated_deltanet"), ops, opt);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("operand 'a' is missing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fusedRecurrence(variant("hgrn"), ops, opt), std::invalid_argument);
  opt.keyDim = 0;
  EXPECT_THROW(fusedRecurrence(variant("gated_deltanet"), ops, opt), std::invalid_argument);
}

}  // namespace
}  // namespace linac::prologue
