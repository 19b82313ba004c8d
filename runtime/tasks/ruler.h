// RULER's synthetic long-context tasks (Hsieh et al. 2024, NVIDIA/RULER, Apache-2.0), generated in
// the model's own tokenizer: eleven of its thirteen tasks (the two QA tasks need SQuAD/HotpotQA).
//
//   niah_single_1..3    one needle; haystack noise sentences / essay text / essay text; the key a
//                       word pair, the value a 7-digit number / number / UUID
//   niah_multikey_1..3  the needle among 3 other needles in essay text / among distractor needles
//                       (word keys, number values) / among distractor needles (UUID keys and values)
//   niah_multivalue     one key with 4 values in essay text; all 4 asked
//   niah_multiquery     4 keys in essay text; all 4 asked
//   vt                  variable tracking: a chain of 5 assignments hidden in noise; name them all
//   cwe                 common-word extraction: the 10 most common words of a numbered list
//   fwe                 frequent-word extraction: the 3 most frequent coded words (Zipf, alpha 2)
//
// Each prompt is RULER's template followed by its answer prefix; the model continues it greedily
// for at most the task's maxNew tokens (RULER's tokens_to_generate) and is scored by string match
// (scoring.h). A prompt is sized to its context length: the haystack grows (binary search, every
// size measured with the tokenizer) to the largest that keeps start token + prompt + maxNew
// within the context. "Essay" haystacks are the run's corpus text, from its first word on (cycled
// when the corpus is shorter than the context), as RULER uses the start of its essay collection.
// The prompt wording is RULER's (scripts/data/synthetic/constants.py); the code is linac's own.
//
// Departures: keys of one example are distinct, distractor needles never reuse a real key, and fwe
// uses at least the number of words that makes the top three counts strictly ordered (each so the
// answer is unique); vt puts each noise paragraph and assignment on its own line, and its one-shot
// example takes its smallest form (5 noise lines) where 500 tokens cannot hold it (the byte
// tokenizer). Sizes are in the model's tokens, so a byte-level model holds less text per context:
// vt and cwe need more than 1024 bytes, and cwe, which repeats its common words 30 times from
// 4096 tokens on, about 5.5k bytes there.
#pragma once

#include "data/data.h"
#include "tasks/language_model.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace linac::tasks {

enum class RulerMetric { MatchAll, MatchPart };

struct RulerTaskInfo {
  std::string name;
  int64_t maxNew = 0;  // tokens generated at most (RULER's tokens_to_generate)
  RulerMetric metric = RulerMetric::MatchAll;
};

/// The eleven tasks, in RULER's order.
const std::vector<RulerTaskInfo>& rulerTasks();
/// Throws std::invalid_argument listing the valid names.
const RulerTaskInfo& rulerTask(const std::string& name);

struct RulerSetup {
  const data::Tokenizer* tokenizer = nullptr;
  std::vector<std::string> haystackWords;  // the essay haystack: the corpus text split at whitespace
};

struct RulerExample {
  std::string prompt;                // template + answer prefix, without the start token
  std::vector<std::string> answers;  // the references
  int64_t promptTokens = 0;          // promptIds(prompt).size()
};

/// The task cannot be posed within the context (its smallest prompt + maxNew is longer).
class RulerDoesNotFit : public std::runtime_error {
 public:
  RulerDoesNotFit(const std::string& what, int64_t neededTokens)
      : std::runtime_error(what), neededTokens_(neededTokens) {}
  int64_t neededTokens() const { return neededTokens_; }

 private:
  int64_t neededTokens_;
};

/// What the model is given: the tokenizer's document separator (the start of a document for a
/// model trained on separated documents) followed by the text's ids.
TokenIds promptIds(const data::Tokenizer& tokenizer, const std::string& text);

/// Example `index` of `task` at `context` tokens, a pure function of (task, context, seed,
/// index) and the setup. Throws RulerDoesNotFit, or std::invalid_argument for a task that needs
/// the essay haystack when setup.haystackWords is empty.
RulerExample makeRulerExample(const std::string& task, const RulerSetup& setup, int64_t context, uint64_t seed,
                              int64_t index);

/// Whitespace-separated words of `text`.
std::vector<std::string> splitWords(const std::string& text);

}  // namespace linac::tasks
