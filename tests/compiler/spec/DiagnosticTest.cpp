// Every diagnostic of the variant parser, each pinned to its exact one-line text: the location
// inside the file (columns inside expression strings included) and the message.
#include "TestUtil.h"

namespace linac::spec::test {
namespace {

struct Case {
  const char* fixture;
  const char* expected;
};

class VariantDiagnostic : public ::testing::TestWithParam<Case> {};

TEST_P(VariantDiagnostic, ExactText) {
  const Case& c = GetParam();
  EXPECT_EQ(variantError(c.fixture), c.expected);
}

// clang-format off
const Case kCases[] = {
  {"yaml_syntax.yaml", "fixtures/yaml_syntax.yaml:3:8: error: invalid YAML: end of sequence flow not found"},
  {"empty.yaml", "fixtures/empty.yaml:1:1: error: empty spec file; expected a mapping of fields"},
  {"nul_byte.yaml", "fixtures/nul_byte.yaml:2:9: error: file is not text: NUL byte at offset 16"},
  {"bad_utf8.yaml", "fixtures/bad_utf8.yaml:2:17: error: file is not text: invalid UTF-8 byte 0xe9 at offset 24"},
  {"misspelled_field.yaml", "fixtures/misspelled_field.yaml:2:1: error: unknown field 'haeds' in variant; did you mean 'heads'?"},
  {"missing_field.yaml", "fixtures/missing_field.yaml:1:1: error: missing required field 'heads' in variant"},
  {"duplicate_field.yaml", "fixtures/duplicate_field.yaml:4:1: error: duplicate field 'heads' in variant (first given at line 2)"},
  {"wrong_type.yaml", "fixtures/wrong_type.yaml:2:8: error: field 'heads' must be an integer, got 'four'"},
  {"nonpositive_dim.yaml", "fixtures/nonpositive_dim.yaml:3:10: error: field 'key_dim' must be between 1 and 65536, got 0"},
  {"unknown_name.yaml", "fixtures/unknown_name.yaml:15:16: error: unknown name 'A_lgo' in expression; did you mean 'A_log'?"},
  {"unknown_function.yaml", "fixtures/unknown_function.yaml:15:25: error: unknown function 'expp'; did you mean 'exp'? (valid: abs, clamp, exp, log, logsigmoid, max, min, pow, rsqrt, sigmoid, silu, softplus, sqrt, tanh)"},
  // The ')' of "softplus(a +)": the string starts after the quote in column 11.
  {"expr_parse_error.yaml", "fixtures/expr_parse_error.yaml:15:37: error: expected an operand, found ')'"},
  {"single_quoted_error.yaml", "fixtures/single_quoted_error.yaml:15:37: error: expected an operand, found ')'"},
  {"plain_scalar_error.yaml", "fixtures/plain_scalar_error.yaml:15:36: error: expected an operand, found ')'"},
  // A block scalar: the error is on the second content line, at its own column.
  {"block_scalar_error.yaml", "fixtures/block_scalar_error.yaml:17:21: error: expected an operand, found ')'"},
  {"cyclic_defs.yaml", "fixtures/cyclic_defs.yaml:18:3: error: cyclic definition: f -> g -> f"},
  {"positive_decay.yaml", "fixtures/positive_decay.yaml:15:11: error: decay 'exp(a)' is provably positive, but it is a log-space decay and must be <= 0; did you mean '-exp(a)'?"},
  {"unknown_update.yaml", "fixtures/unknown_update.yaml:16:11: error: unknown update rule 'delt'; did you mean 'delta'? (valid: additive, delta)"},
  {"unknown_readout.yaml", "fixtures/unknown_readout.yaml:16:12: error: unknown readout 'exclusive'; did you mean 'inclusive'? (valid: inclusive, exclusive_bonus)"},
  {"delta_without_beta.yaml", "fixtures/delta_without_beta.yaml:12:3: error: missing required field 'beta' in recurrence (update: delta needs it)"},
  {"extent_mismatch.yaml", "fixtures/extent_mismatch.yaml:13:6: error: recurrence k 'v' has value extent; expected key"},
  {"decay_value_extent.yaml", "fixtures/decay_value_extent.yaml:15:11: error: decay '(a * v)' has value extent; expected scalar, head, key"},
  {"bad_chunk.yaml", "fixtures/bad_chunk.yaml:16:8: error: chunk must be a power of two in [16, 256], got 48"},
  {"bonus_wrong_extent.yaml", "fixtures/bonus_wrong_extent.yaml:17:10: error: bonus parameter 'A_log' must have key extent, got head"},
};
// clang-format on

INSTANTIATE_TEST_SUITE_P(Fixtures, VariantDiagnostic, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string name = info.param.fixture;
  name = name.substr(0, name.find('.'));
  return name;
});

TEST(Diagnostic, MissingFile) {
  EXPECT_EQ(errorOf([] { loadVariant("/nonexistent/dir/x.yaml"); }),
            "/nonexistent/dir/x.yaml: error: cannot read file: No such file or directory");
}

TEST(Diagnostic, LoadVariantUsesThePathInLocations) {
  std::string path = fixturePath("misspelled_field.yaml");
  EXPECT_EQ(errorOf([&] { loadVariant(path); }),
            path + ":2:1: error: unknown field 'haeds' in variant; did you mean 'heads'?");
}

TEST(Diagnostic, IndivisibleDimension) {
  // expand 1.5 * hidden 100 = 150 does not split over 4 heads.
  VariantSpec v = parseVariant(readFixture("expand_dim.yaml"), "fixtures/expand_dim.yaml");
  EXPECT_EQ(v.keyDim.resolve(1024, v.heads), 384);
  EXPECT_EQ(errorOf([&] { v.keyDim.resolve(100, v.heads); }),
            "fixtures/expand_dim.yaml:3:10: error: expand 1.5 * hidden 100 = 150 is not divisible by 4 heads");
  EXPECT_EQ(errorOf([&] { v.keyDim.resolve(3, v.heads); }),
            "fixtures/expand_dim.yaml:3:10: error: expand 1.5 * hidden 3 = 4.5 is not a positive whole number of at most 1073741824");
}

TEST(Diagnostic, SpecErrorParts) {
  SpecError e(SourceLoc{"a.yaml", 4, 3}, "unknown field 'haeds' in variant");
  EXPECT_STREQ(e.what(), "a.yaml:4:3: error: unknown field 'haeds' in variant");
  EXPECT_EQ(e.message(), "unknown field 'haeds' in variant");
  EXPECT_EQ(e.loc().line, 4);
}

TEST(Diagnostic, ClosestMatch) {
  EXPECT_EQ(closestMatch("haeds", {"heads", "key_dim", "name"}), "heads");
  EXPECT_EQ(closestMatch("HEADS", {"heads"}), "heads");
  EXPECT_EQ(closestMatch("x", {"k", "q"}), "");
  EXPECT_EQ(closestMatch("completely_different", {"heads"}), "");
  EXPECT_EQ(closestMatch("", {"heads"}), "");
}

TEST(Diagnostic, UnknownFieldWithoutSuggestionListsValidFields) {
  std::string text = "name: x\nheads: 4\nkey_dim: 8\nzzzzzzzz: 1\n";
  EXPECT_EQ(errorOf([&] { parseVariant(text, "t.yaml"); }),
            "t.yaml:4:1: error: unknown field 'zzzzzzzz' in variant (valid: name, kind, description, heads, "
            "key_dim, value_dim, inputs, params, define, recurrence, output, attention, chunk)");
}

TEST(Diagnostic, NestedUnknownFieldAndEnum) {
  std::string base = readFixture("base_ok.yaml");
  std::string t1 = base;
  t1.replace(t1.find("q: {extent: key}"), 16, "q: {extnt: key}");
  EXPECT_EQ(errorOf([&] { parseVariant(t1, "t.yaml"); }),
            "t.yaml:5:7: error: unknown field 'extnt' in input 'q'; did you mean 'extent'?");
  std::string t2 = base;
  t2.replace(t2.find("q: {extent: key}"), 16, "q: {extent: kye}");
  EXPECT_EQ(errorOf([&] { parseVariant(t2, "t.yaml"); }),
            "t.yaml:5:15: error: unknown extent 'kye'; did you mean 'key'? (valid: scalar, head, key, value, hidden)");
}

TEST(Diagnostic, StructuralRules) {
  const std::string head = "name: x\nheads: 4\nkey_dim: 8\ninputs:\n  q: {extent: key}\n  v: {extent: value}\n";
  auto err = [&](const std::string& rest) { return errorOf([&] { parseVariant(head + rest, "t.yaml"); }); };
  EXPECT_EQ(err("recurrence:\n  q: q\n  v: v\n"), "t.yaml:8:3: error: missing required field 'k' in recurrence");
  EXPECT_EQ(err("recurrence:\n  state: vector\n  q: q\n  v: v\n"),
            "t.yaml:9:3: error: field 'q' is not used with state: vector");
  EXPECT_EQ(err("recurrence:\n  q: q\n  k: q\n  v: v\n  beta: q\n"),
            "t.yaml:11:3: error: field 'beta' is only used with update: delta");
  EXPECT_EQ(err("recurrence:\n  q: q\n  k: q\n  v: v\n  readout: exclusive_bonus\n  bonus: u\n"),
            "t.yaml:12:10: error: unknown bonus parameter 'u' (none are defined)");
  EXPECT_EQ(err("recurrence:\n  q: q\n  k: q\n  v: v\n  decay: \"sigmoid(q) + exp(q)\"\n"),
            "t.yaml:11:11: error: decay '(sigmoid(q) + exp(q))' is provably positive, but it is a log-space "
            "decay and must be <= 0; did you mean '-(sigmoid(q) + exp(q))'?");
  EXPECT_EQ(err("recurrence:\n  q: q\n  k: \"q * v\"\n  v: v\n"),
            "t.yaml:9:7: error: cannot combine a key-extent operand with a value-extent operand in '*'");
  EXPECT_EQ(err("recurrence:\n  q: q\n  k: \"exp\"\n  v: v\n"),
            "t.yaml:9:7: error: 'exp' is a function; call it as exp(...)");
  EXPECT_EQ(err("recurrence:\n  q: q\n  k: \"max(q)\"\n  v: v\n"),
            "t.yaml:9:7: error: function 'max' takes 2 arguments, got 1");
  EXPECT_EQ(err("params:\n  q: {extent: head}\nrecurrence:\n  q: q\n  k: q\n  v: v\n"),
            "t.yaml:8:3: error: name 'q' is already defined as an input at line 5");
  EXPECT_EQ(err("define:\n  layer: \"q\"\nrecurrence:\n  q: q\n  k: q\n  v: v\n"),
            "t.yaml:8:3: error: a definition name 'layer' is reserved for a built-in");
  EXPECT_EQ(err("attention: {rope: true}\nrecurrence:\n  q: q\n  k: q\n  v: v\n"),
            "t.yaml:7:1: error: field 'attention' is only used by kind: attention");
}

TEST(Diagnostic, AcceptedDecays) {
  const std::string head =
      "name: x\nheads: 4\nkey_dim: 8\ninputs:\n  q: {extent: key}\n  v: {extent: value}\n"
      "  f: {extent: key, activation: sigmoid}\nrecurrence:\n  q: q\n  k: q\n  v: v\n  decay: ";
  for (const char* decay : {"\"-exp(q)\"", "\"logsigmoid(q)\"", "\"log(f)\"", "\"-softplus(q) * sigmoid(q)\"",
                            "\"min(q, -1)\"", "0", "\"-0.5\"", "\"log(1 - pow(2, -5 - head))\""})
    EXPECT_EQ(errorOf([&] { parseVariant(head + decay + "\n", "t.yaml"); }), "<no error>") << decay;
  for (const char* decay : {"\"exp(q)\"", "\"f\"", "\"max(q, 1)\"", "\"1e-3\"", "\"sqrt(q) + 1\""})
    EXPECT_NE(errorOf([&] { parseVariant(head + decay + "\n", "t.yaml"); }).find("provably positive"),
              std::string::npos)
        << decay;
}

}  // namespace
}  // namespace linac::spec::test
