// Hostile inputs of the kinds the fuzzer produces: each must end in a SpecError (or parse), never
// a crash, a hang or another exception type.
#include "TestUtil.h"

namespace linac::spec::test {
namespace {

void expectSpecErrorOrSuccess(const std::string& text) {
  try {
    parseVariant(text, "f.yaml");
  } catch (const SpecError&) {
  }
  try {
    parseScheduleFile(text, "f.yaml");
  } catch (const SpecError&) {
  }
  try {
    parsePreset(text, "f.yaml");
  } catch (const SpecError&) {
  }
}

TEST(FuzzRegression, DeeplyNestedYaml) {
  EXPECT_NO_FATAL_FAILURE(expectSpecErrorOrSuccess(std::string(4000, '[')));
  EXPECT_NO_FATAL_FAILURE(expectSpecErrorOrSuccess("name: " + std::string(3000, '{')));
}

TEST(FuzzRegression, DeeplyNestedExpression) {
  std::string spec = "name: x\nheads: 1\nkey_dim: 8\ninputs:\n  q: {extent: key}\n  v: {extent: value}\n"
                     "recurrence:\n  q: q\n  k: q\n  v: v\n  decay: \"" +
                     std::string(1000, '-') + "q\"\n";
  EXPECT_NE(errorOf([&] { parseVariant(spec, "f.yaml"); }).find("nests deeper than"), std::string::npos);
}

TEST(FuzzRegression, LongDefinitionChainIsLinear) {
  // Each definition uses the previous one twice: without memoisation, analysis is 2^n. The decay
  // would be 2^200 nodes once definitions are substituted, so it is rejected (LimitsTest.cpp) --
  // at once: the definitions' sizes are memoised too.
  std::string spec = "name: x\nheads: 1\nkey_dim: 8\ninputs:\n  q: {extent: key}\n  v: {extent: value}\ndefine:\n  d0: \"q\"\n";
  const int n = 200;
  for (int i = 1; i < n; ++i) spec += "  d" + std::to_string(i) + ": \"d" + std::to_string(i - 1) + " + d" + std::to_string(i - 1) + "\"\n";
  spec += "recurrence:\n  q: q\n  k: q\n  v: v\n  decay: \"-exp(d" + std::to_string(n - 1) + ")\"\n";
  EXPECT_EQ(errorOf([&] { parseVariant(spec, "f.yaml"); }),
            "f.yaml:212:11: error: decay has more than 10000 nodes once its definitions are substituted; that is "
            "the limit");
}

TEST(FuzzRegression, NotAMapping) {
  EXPECT_EQ(errorOf([] { parseVariant("- a\n- b\n", "f.yaml"); }),
            "f.yaml:1:1: error: a spec file must be a mapping of fields, got a list");
  EXPECT_EQ(errorOf([] { parseVariant("name: x\nheads: 1\nkey_dim: 8\ninputs:\n  q: 3\nrecurrence: {v: q}\n", "f.yaml"); }),
            "f.yaml:5:6: error: input 'q' must be a mapping of fields, got a scalar");
  EXPECT_EQ(errorOf([] { parseVariant("name: x\nheads: 1\nkey_dim: 8\n? [a]\n: 1\n", "f.yaml"); }),
            "f.yaml:4:3: error: field names in variant must be words, got a list");
  EXPECT_EQ(errorOf([] { parseVariant("name: x\nkind: attention\nheads: 2\nkey_dim: 8\nrecurrence: {}\n", "f.yaml"); }),
            "f.yaml:5:1: error: field 'recurrence' is not used by kind: attention");
}

TEST(FuzzRegression, AliasesAndOddScalars) {
  EXPECT_NO_FATAL_FAILURE(expectSpecErrorOrSuccess("a: &x [1, 2]\nb: *x\nname: *x\n"));
  EXPECT_NO_FATAL_FAILURE(expectSpecErrorOrSuccess("name: x\nheads: 99999999999999999999999\n"));
  const std::string huge = "name: x\nheads: 4\nkey_dim: {expand: 1e308}\ninputs: {q: {extent: key}, v: {extent: value}}\n"
                           "recurrence: {q: q, k: q, v: v}\n";
  VariantSpec v = parseVariant(huge, "f.yaml");
  EXPECT_EQ(errorOf([&] { v.keyDim.resolve(1024, v.heads); }),
            "f.yaml:3:10: error: expand 1e+308 * hidden 1024 = inf is not a positive whole number of at most 1073741824");
  EXPECT_NO_FATAL_FAILURE(expectSpecErrorOrSuccess("name: x\nheads:\n"));
}

}  // namespace
}  // namespace linac::spec::test
