// The registry's layer description (registry/layer.h), which the emitter writes from the compiled
// IR and the runtime builds its linear layers from: it says what each spec in specs/ says (read
// here by the spec parser, independently of the compiler's IR), and a layer is built and run from
// it with no spec at all.
#include "model/linear_layer.h"

#include "linac/Spec/SpecParser.h"
#include "registry/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

namespace linac::model {
namespace {

const std::string kSpecs = LINAC_SPECS_DIR;
/// A model width every committed variant resolves at (the tiny preset's).
constexpr int64_t kHidden = 128;

std::vector<spec::VariantSpec> linearSpecs() {
  std::vector<spec::VariantSpec> specs;
  for (const auto& e : std::filesystem::directory_iterator(kSpecs))
    if (e.path().extension() == ".yaml" && e.path().stem() != "attention")
      specs.push_back(spec::loadVariant(e.path().string()));
  std::sort(specs.begin(), specs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return specs;
}

// The spec's enums as the runtime's: the same cases in the same order.
int code(spec::Extent e) { return static_cast<int>(e); }
int code(runtime::Extent e) { return static_cast<int>(e); }

void expectDim(const spec::DimSpec& s, const runtime::DimRule& r, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(r.absolute, s.absolute);
  EXPECT_EQ(r.expand, s.absolute > 0 ? 0.0 : s.expand);
}

/// A role the spec computes with `expr`: present when the spec has it; read as a leaf named
/// like the plain reference, else computed by the role's map.
void expectRole(const spec::ExprPtr& expr, const runtime::RoleSource& role, const runtime::VariantKernels& k,
                const std::string& name, const std::set<std::string>& leaves) {
  SCOPED_TRACE(name);
  EXPECT_EQ(role.present, expr != nullptr);
  if (!expr) return;
  if (expr->kind == spec::ExprKind::Ref && leaves.count(expr->name)) {
    EXPECT_EQ(role.name, expr->name);
  } else {
    EXPECT_EQ(role.name, "");
    EXPECT_NE(k.find(name), nullptr) << "a computed role has a prologue map";
  }
}

TEST(LayerDescription, SaysWhatTheSpecSays) {
  const auto specs = linearSpecs();
  ASSERT_GE(specs.size(), 9u);
  for (const spec::VariantSpec& s : specs) {
    SCOPED_TRACE(s.name);
    const runtime::VariantKernels* k = runtime::Registry::find(s.name);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->specHash, s.hash) << "generated/ is stale: run linac compile";
    const runtime::LayerDescription& l = k->layer;
    EXPECT_EQ(l.heads, s.heads);
    expectDim(s.keyDim, l.keyDim, "key_dim");
    expectDim(s.valueDim, l.valueDim, "value_dim");
    std::set<std::string> leaves = {"head", "layer", "num_layers"};
    ASSERT_EQ(l.inputs.size(), s.inputs.size());
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const spec::InputSpec& a = s.inputs[i];
      const runtime::InputDescription& b = l.inputs[i];
      SCOPED_TRACE(a.name);
      leaves.insert(a.name);
      EXPECT_EQ(b.name, a.name);
      EXPECT_EQ(code(b.extent), code(a.extent));
      EXPECT_EQ(b.lowRank, a.lowRank);
      EXPECT_EQ(b.conv, a.conv);
      EXPECT_EQ(static_cast<int>(b.activation), static_cast<int>(a.activation));
      EXPECT_EQ(b.l2norm, a.l2norm);
      EXPECT_EQ(b.tokenShift, a.tokenShift);
      EXPECT_EQ(b.bias, a.bias);
      EXPECT_EQ(b.rope, a.rope);
    }
    ASSERT_EQ(l.params.size(), s.params.size());
    for (size_t i = 0; i < s.params.size(); ++i) {
      const spec::ParamSpec& a = s.params[i];
      const runtime::ParamDescription& b = l.params[i];
      SCOPED_TRACE(a.name);
      leaves.insert(a.name);
      EXPECT_EQ(b.name, a.name);
      EXPECT_EQ(code(b.extent), code(a.extent));
      EXPECT_EQ(static_cast<int>(b.init), static_cast<int>(a.init.kind));
      const bool takesA = a.init.kind != spec::InitKind::Zeros && a.init.kind != spec::InitKind::Ones;
      const bool takesB = takesA && a.init.kind != spec::InitKind::Constant && a.init.kind != spec::InitKind::Normal;
      EXPECT_EQ(b.a, takesA ? a.init.a : 0.0);
      EXPECT_EQ(b.b, takesB ? a.init.b : 0.0);
    }
    const spec::RecurrenceSpec& r = s.recurrence;
    const bool matrix = r.state == spec::StateKind::Matrix;
    EXPECT_EQ(k->vectorState, !matrix);
    if (matrix) {
      expectRole(r.q, l.q, *k, "q", leaves);
      expectRole(r.k, l.k, *k, "k", leaves);
    }
    expectRole(r.v, l.v, *k, "v", leaves);
    expectRole(r.decay, l.decay, *k, "decay", leaves);
    expectRole(r.update == spec::UpdateKind::Delta ? r.beta : nullptr, l.beta, *k, "beta", leaves);
    EXPECT_EQ(l.bonus, r.readout == spec::ReadoutKind::ExclusiveBonus ? r.bonus : "");
    EXPECT_EQ(l.scale, matrix ? r.scale : std::nullopt);
    EXPECT_EQ(static_cast<int>(l.norm), static_cast<int>(s.output.norm));
    expectRole(s.output.gate, l.gate, *k, "gate", leaves);
    expectRole(s.output.residual, l.residual, *k, "residual", leaves);
  }
}

TEST(LayerDescription, LayerRunsWithoutASpec) {
  // No spec file is read here: every registered variant's layer comes from its description.
  const auto variants = runtime::Registry::all();
  ASSERT_GE(variants.size(), 9u);
  for (const runtime::VariantKernels* k : variants) {
    SCOPED_TRACE(k->name);
    torch::manual_seed(1);
    LinearMixer layer(*k, kHidden, /*layer=*/1, /*numLayers=*/4, MixerBackend::Kernels);
    int64_t count = 0;
    for (const auto& p : layer->parameters()) count += p.numel();
    EXPECT_EQ(count, planCount(LinearMixerImpl::plan(*k, kHidden)));
    torch::NoGradGuard noGrad;
    torch::Tensor x = torch::randn({2, 12, kHidden});  // [B, T, hidden]
    torch::Tensor y = layer->forward(x);
    EXPECT_EQ(y.sizes(), x.sizes());
    EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
    EXPECT_GT(y.abs().max().item<double>(), 0.0);
    // The cached path (prefill then one decode step) continues the same layer.
    LinearLayerCache cache = layer->makeCache(2, x.options());
    torch::Tensor head = layer->forwardCached(x.narrow(1, 0, 11), cache, 0);
    torch::Tensor last = layer->forwardCached(x.narrow(1, 11, 1), cache, 11);
    EXPECT_TRUE(torch::allclose(torch::cat({head, last}, 1), y, 1e-4, 1e-5));
    // Only the oracle reads a spec, and says so when it has none.
    EXPECT_THROW(LinearMixer(*k, kHidden, 1, 4, MixerBackend::Oracle), std::invalid_argument);
  }
}

}  // namespace
}  // namespace linac::model
