// Scoring rules of the two harnesses, as pure functions over strings and numbers.
//
// RULER (NVIDIA/RULER, scripts/eval): a prediction is the generated text with every control
// character (U+0000-U+001F) turned into a newline and surrounding whitespace stripped; a reference
// matches when it occurs in the prediction, case-insensitively. string_match_all scores the
// fraction of an example's references found (needle, variable-tracking and word-extraction
// tasks); string_match_part scores 1 when any is found. Task scores are means over examples,
// reported in percent as RULER does.
//
// lm-evaluation-harness (multiple_choice): acc is whether the choice with the highest summed
// log-likelihood is the gold one; acc_norm divides each log-likelihood by the length of its
// choice text first (lm-eval takes Python's len() of the choice without the target delimiter:
// characters, which equals bytes for ASCII; here UTF-8 code points). Ties go to the first choice,
// as numpy's argmax does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace linac::tasks {

std::string rulerPostprocess(const std::string& generated);
/// Fraction (0..1) of `references` that occur in `prediction`, ignoring ASCII case.
double stringMatchAll(const std::string& prediction, const std::vector<std::string>& references);
/// 1 when any of `references` occurs in `prediction` (ignoring ASCII case), else 0.
double stringMatchPart(const std::string& prediction, const std::vector<std::string>& references);

/// Number of UTF-8 code points in `text` (bytes that are not continuation bytes).
int64_t utf8Length(const std::string& text);

/// Index of the largest value; the first on ties. `values` must be non-empty.
int64_t argmaxFirst(const std::vector<double>& values);

struct ChoicePrediction {
  int64_t acc = 0;      // argmax of the summed log-likelihoods
  int64_t accNorm = 0;  // argmax of log-likelihood / utf8Length(choice)
};
/// `logLikelihoods[i]` scores `choices[i]` (the choice text without the target delimiter).
ChoicePrediction predictChoice(const std::vector<double>& logLikelihoods, const std::vector<std::string>& choices);

}  // namespace linac::tasks
