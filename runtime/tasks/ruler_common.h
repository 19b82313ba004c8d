// Internal to runtime/tasks: what the RULER generators share (random draws, sizing to a context).
#pragma once

#include <cstddef>  // before data/rng.h, which uses size_t

#include "data/rng.h"
#include "tasks/ruler.h"

#include <functional>
#include <string>
#include <vector>

namespace linac::tasks::detail {

using data::detail::Rng;

/// One example for a haystack of a given size (noise sentences, essay words, distractor
/// needles, words of a list...).
struct Built {
  std::string prompt;
  std::vector<std::string> answers;
};
/// Must be deterministic: the same size gives the same example (generators re-seed per call).
using Builder = std::function<Built(int64_t size)>;

/// The example of the largest size in [minSize, maxSize] whose promptIds + maxNew fit in
/// `context` tokens, assuming the length grows with the size (binary search after doubling);
/// throws RulerDoesNotFit when minSize does not fit.
RulerExample fitToContext(const RulerSetup& setup, const std::string& task, int64_t context, int64_t maxNew,
                          int64_t minSize, int64_t maxSize, const Builder& build);

/// A stream number per task, so tasks sharing a seed draw independently.
uint64_t taskStream(const std::string& task);

/// k distinct values of [0, n), in the order drawn (k <= n).
std::vector<int64_t> sampleDistinct(Rng& rng, int64_t n, int64_t k);
/// Uniform in [lo, hi].
int64_t uniformInt(Rng& rng, int64_t lo, int64_t hi);
/// A decimal number of exactly `digits` digits (no leading zero).
std::string randomNumber(Rng& rng, int digits);
/// A random version-4 UUID, lowercase, 8-4-4-4-12.
std::string randomUuid(Rng& rng);
/// "adjective-noun" from the word lists (words.h).
std::string randomWordPair(Rng& rng);
/// `count` letters drawn from `alphabet` with replacement.
std::string randomLetters(Rng& rng, std::string_view alphabet, int count);

std::string join(const std::vector<std::string>& parts, const std::string& separator);

/// The sentence RULER repeats as its noise haystack.
extern const char* const kNoiseSentence;

RulerExample makeNiah(const std::string& task, const RulerSetup& setup, int64_t context, uint64_t seed, int64_t index);
RulerExample makeVariableTracking(const RulerSetup& setup, int64_t context, uint64_t seed, int64_t index);
RulerExample makeCommonWords(const RulerSetup& setup, int64_t context, uint64_t seed, int64_t index);
RulerExample makeFrequentWords(const RulerSetup& setup, int64_t context, uint64_t seed, int64_t index);

}  // namespace linac::tasks::detail
