// Ranges of every number field of a variant spec and a preset (linac/Spec/Limits.h): a value out of
// range, past int64 or past float32 included, is an error at the value that says what is valid.
#include "TestUtil.h"

#include <sstream>

namespace linac::spec::test {
namespace {

const std::vector<std::string> kVariant = {
    "name: x", "heads: 4", "key_dim: 64", "inputs:", "  q: {extent: key}", "  v: {extent: value}",
    "params:", "  A: {extent: head}", "recurrence:", "  q: q", "  k: q", "  v: v"};

const std::vector<std::string> kAttention = {"name: att", "kind: attention", "heads: 4", "key_dim: 64"};

const std::vector<std::string> kPreset = {"name: p", "hidden: 1024", "layers: 24", "vocab: 32000", "attn_heads: 16"};

/// `lines` with line `number` (1-based) replaced by `text`, or `text` appended when past the end.
std::string with(std::vector<std::string> lines, size_t number, const std::string& text) {
  if (number <= lines.size()) lines[number - 1] = text;
  else lines.push_back(text);
  std::ostringstream os;
  for (const std::string& l : lines) os << l << "\n";
  return os.str();
}

std::string variantErr(size_t line, const std::string& text) {
  return errorOf([&] { parseVariant(with(kVariant, line, text), "t.yaml"); });
}

TEST(Ranges, Heads) {
  EXPECT_EQ(variantErr(2, "heads: 9223372036854775807"),
            "t.yaml:2:8: error: field 'heads' must be between 1 and 1024, got 9223372036854775807");
  EXPECT_EQ(variantErr(2, "heads: 99999999999999999999"),
            "t.yaml:2:8: error: field 'heads' must be between 1 and 1024, got 99999999999999999999");
  EXPECT_EQ(variantErr(2, "heads: -3"), "t.yaml:2:8: error: field 'heads' must be between 1 and 1024, got -3");
  EXPECT_EQ(variantErr(2, "heads: 4.5"), "t.yaml:2:8: error: field 'heads' must be an integer, got '4.5'");
  EXPECT_EQ(variantErr(2, "heads: 1024"), "<no error>");
}

TEST(Ranges, Dimensions) {
  EXPECT_EQ(variantErr(3, "key_dim: 70000"), "t.yaml:3:10: error: field 'key_dim' must be between 1 and 65536, got 70000");
  EXPECT_EQ(variantErr(13, "value_dim: 0"), "t.yaml:13:12: error: field 'value_dim' must be between 1 and 65536, got 0");
  // A ratio is bounded when it is resolved against the preset's width.
  VariantSpec v = parseVariant(with(kVariant, 3, "key_dim: {expand: 128}"), "t.yaml");
  EXPECT_EQ(v.keyDim.resolve(512, v.heads), 16384);
  EXPECT_EQ(errorOf([&] { v.keyDim.resolve(4096, 1); }),
            "t.yaml:3:10: error: expand 128 * hidden 4096 = 524288 over 1 heads is 524288 per head; the limit is 65536");
}

TEST(Ranges, InputsAndChunk) {
  EXPECT_EQ(variantErr(5, "  q: {extent: key, conv: 100000}"),
            "t.yaml:5:26: error: field 'conv' must be between 1 and 256, got 100000");
  EXPECT_EQ(variantErr(5, "  q: {extent: key, low_rank: 70000}"),
            "t.yaml:5:30: error: field 'low_rank' must be between 1 and 65536, got 70000");
  EXPECT_EQ(variantErr(13, "chunk: 4096"), "t.yaml:13:8: error: field 'chunk' must be between 16 and 256, got 4096");
  EXPECT_EQ(variantErr(13, "chunk: 48"), "t.yaml:13:8: error: chunk must be a power of two in [16, 256], got 48");
}

TEST(Ranges, Float32Numbers) {
  EXPECT_EQ(variantErr(8, "  A: {extent: head, init: {constant: 1e300}}"),
            "t.yaml:8:38: error: field 'constant' must be a float32 number (magnitude at most 3.4028235e+38), got "
            "1e+300");
  EXPECT_EQ(variantErr(8, "  A: {extent: head, init: {uniform: [0, 1e39]}}"),
            "t.yaml:8:41: error: init 'uniform' bounds must be finite float32 numbers");
  EXPECT_EQ(variantErr(13, "  scale: 1e300"),
            "t.yaml:13:10: error: field 'scale' must be a float32 number (magnitude at most 3.4028235e+38), got 1e+300");
  EXPECT_EQ(variantErr(13, "  scale: 1e-50"), "t.yaml:13:10: error: field 'scale' must be positive, got 1e-50");
}

TEST(Ranges, Attention) {
  auto err = [](const std::string& line) {
    return errorOf([&] { parseVariant(with(kAttention, 5, line), "a.yaml"); });
  };
  EXPECT_EQ(err("attention: {kv_heads: 8}"), "a.yaml:5:23: error: field 'kv_heads' must be between 1 and 4, got 8");
  EXPECT_EQ(err("attention: {rope_theta: 1e300}"),
            "a.yaml:5:25: error: field 'rope_theta' must be a float32 number (magnitude at most 3.4028235e+38), got "
            "1e+300");
  EXPECT_EQ(err("attention: {kv_heads: 2}"), "<no error>");
}

TEST(Ranges, Preset) {
  auto err = [](size_t line, const std::string& text) {
    return errorOf([&] { parsePreset(with(kPreset, line, text), "p.yaml"); });
  };
  EXPECT_EQ(err(2, "hidden: 100000"), "p.yaml:2:9: error: field 'hidden' must be between 1 and 65536, got 100000");
  EXPECT_EQ(err(3, "layers: 2000"), "p.yaml:3:9: error: field 'layers' must be between 1 and 1024, got 2000");
  EXPECT_EQ(err(4, "vocab: 100000000"), "p.yaml:4:8: error: field 'vocab' must be between 1 and 16777216, got 100000000");
  EXPECT_EQ(err(5, "attn_heads: 2048"), "p.yaml:5:13: error: field 'attn_heads' must be between 1 and 1024, got 2048");
  EXPECT_EQ(err(6, "intermediate: -1"),
            "p.yaml:6:15: error: field 'intermediate' must be between 0 and 1048576, got -1");
  EXPECT_EQ(err(6, "max_seq_len: 99999999999"),
            "p.yaml:6:14: error: field 'max_seq_len' must be between 1 and 16777216, got 99999999999");
  EXPECT_EQ(err(6, "intermediate: 0"), "<no error>");
}

}  // namespace
}  // namespace linac::spec::test
