// The largest values a spec may give. Each is far above any real model (the study's specs use at
// most 32 heads, per-head sizes of 512, convs of width 4, expressions of a few dozen nodes) and low
// enough that every size, and every product of sizes the kernels form, fits the `int` the generated
// code and the kernels use, and that no analysis of a spec runs long. specs/README.md lists them.
#pragma once

#include <cstdint>

namespace linac::spec::limits {

// ----- variant spec ------------------------------------------------------------------------------
inline constexpr int64_t kMaxHeads = 1024;          // heads, kv_heads, a preset's attn_heads
inline constexpr int64_t kMaxHeadDim = 65536;       // key_dim / value_dim per head (also resolved)
inline constexpr int64_t kMaxLowRank = 65536;       // an input's low_rank
inline constexpr int64_t kMaxConv = 256;            // an input's short conv width

// ----- preset ------------------------------------------------------------------------------------
inline constexpr int64_t kMaxHidden = 65536;
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxVocab = int64_t(1) << 24;         // 16,777,216
inline constexpr int64_t kMaxIntermediate = int64_t(1) << 20;  // 1,048,576
inline constexpr int64_t kMaxSeqLen = int64_t(1) << 24;

// ----- expressions -------------------------------------------------------------------------------
/// Nodes (numbers, names, operators, calls) of one expression, counted both as written and with
/// its definitions substituted (what one prologue function computes).
inline constexpr int64_t kMaxExprNodes = 10000;
/// Parentheses, unary minus and calls nested inside each other in one expression string.
inline constexpr int kMaxExprNesting = 200;
/// Definitions that use definitions that use ...: the longest such chain.
inline constexpr int kMaxDefineDepth = 256;

}  // namespace linac::spec::limits
