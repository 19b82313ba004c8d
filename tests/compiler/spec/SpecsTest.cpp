// The shipped specs in specs/: all parse, and they say what DESIGN.md section 3 says.
#include "TestUtil.h"

#include <algorithm>
#include <filesystem>

namespace linac::spec::test {
namespace {

VariantSpec load(const std::string& name) { return loadVariant(std::string(LINAC_SPECS_DIR) + "/" + name + ".yaml"); }

TEST(Specs, AllParse) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(LINAC_SPECS_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    VariantSpec v;
    EXPECT_NO_THROW(v = loadVariant(entry.path().string()));
    EXPECT_EQ(v.name, entry.path().stem().string());
    EXPECT_EQ(v.hash.size(), 64u);
    ++count;
  }
  EXPECT_GE(count, 10);  // the eight variants, attention, and at least one new one
}

TEST(Specs, ToStringRoundTripsEveryExpression) {
  for (const auto& entry : std::filesystem::directory_iterator(LINAC_SPECS_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    VariantSpec v = loadVariant(entry.path().string());
    std::vector<ExprPtr> exprs = {v.recurrence.q, v.recurrence.k, v.recurrence.v, v.recurrence.decay,
                                  v.recurrence.beta, v.output.gate, v.output.residual};
    for (const DefSpec& d : v.defs) exprs.push_back(d.expr);
    for (const ExprPtr& e : exprs) {
      if (!e) continue;
      std::string once = toString(*e);
      EXPECT_EQ(toString(*parseExpr(once, SourceLoc{"rt", 1, 1})), once) << entry.path();
    }
  }
}

TEST(Specs, GatedDeltaNet) {
  VariantSpec v = load("gated_deltanet");
  EXPECT_EQ(v.heads, 4);
  EXPECT_EQ(v.keyDim.resolve(1024, v.heads), 256);
  EXPECT_EQ(v.valueDim.resolve(1024, v.heads), 512);
  EXPECT_EQ(v.recurrence.update, UpdateKind::Delta);
  EXPECT_EQ(toString(*v.recurrence.decay), "((-exp(A_log)) * softplus((a + dt_bias)))");
  EXPECT_EQ(toString(*v.recurrence.beta), "sigmoid(b)");
  ASSERT_EQ(v.params.size(), 2u);
  EXPECT_EQ(v.params[0].init.kind, InitKind::LogUniform);
  EXPECT_EQ(v.params[0].init.b, 16);
  EXPECT_EQ(v.params[1].init.kind, InitKind::DtBias);
  EXPECT_DOUBLE_EQ(v.params[1].init.a, 0.001);
  const InputSpec& q = v.inputs[0];
  EXPECT_EQ(q.name, "q");
  EXPECT_EQ(q.conv, 4);
  EXPECT_EQ(q.activation, Activation::Silu);
  EXPECT_TRUE(q.l2norm);
  EXPECT_EQ(v.output.norm, NormKind::RMSNorm);
  // The decay's column: the '-' right after the opening quote.
  EXPECT_EQ(v.recurrence.decay->loc.line, 27);
  EXPECT_EQ(v.recurrence.decay->loc.col, 11);
}

TEST(Specs, Others) {
  VariantSpec hgrn = load("hgrn");
  EXPECT_EQ(hgrn.recurrence.state, StateKind::Vector);
  EXPECT_EQ(hgrn.valueDim.resolve(1024, hgrn.heads), 1024);
  EXPECT_EQ(hgrn.defs.size(), 2u);
  VariantSpec rwkv = load("rwkv6");
  EXPECT_EQ(rwkv.recurrence.readout, ReadoutKind::ExclusiveBonus);
  EXPECT_EQ(rwkv.recurrence.bonus, "u");
  EXPECT_TRUE(rwkv.inputs[0].tokenShift);
  EXPECT_EQ(rwkv.output.norm, NormKind::GroupNorm);
  VariantSpec gla = load("gla");
  EXPECT_EQ(gla.keyDim.resolve(1024, gla.heads), 128);
  EXPECT_EQ(gla.inputs[3].lowRank, 16);
  VariantSpec retnet = load("retnet");
  EXPECT_TRUE(retnet.inputs[0].rope);
  EXPECT_EQ(retnet.valueDim.resolve(1024, retnet.heads), 512);
  VariantSpec mamba = load("mamba2");
  EXPECT_EQ(mamba.valueDim.resolve(1024, mamba.heads), 64);
  EXPECT_EQ(toString(*mamba.output.residual), "(D * x)");
  VariantSpec attn = load("attention");
  EXPECT_EQ(attn.kind, VariantKind::Attention);
  EXPECT_TRUE(attn.attention.rope);
  VariantSpec diag = load("gated_delta_diag");
  EXPECT_EQ(diag.recurrence.update, UpdateKind::Delta);
  EXPECT_EQ(toString(*diag.recurrence.decay), "(logsigmoid(gk) / 16)");
}

TEST(Specs, HashIsTheFileSha256) {
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string text = readFixture("base_ok.yaml");
  EXPECT_EQ(parseVariant(text, "x").hash, sha256Hex(text));
}

}  // namespace
}  // namespace linac::spec::test
