// Zero-shot tasks scored as lm-evaluation-harness scores them, from local JSONL files (one JSON
// object per line; the converter tools/tasks/convert_lm_eval.py writes them from the datasets'
// published formats with lm-eval's prompts). Three kinds, told apart by their fields:
//
//   multiple choice   {"context": "Question: ...\nAnswer:", "choices": ["...", ...], "gold": 0}
//                     each choice scored as the continuation target_delimiter + choice of the
//                     context; reports acc and acc_norm (scoring.h)      arc_easy, piqa, hellaswag
//   partial context   {"contexts": ["... option 1", "... option 2"], "continuation": "...", "gold": 1}
//                     one continuation scored after each context; reports acc       winogrande
//   last word         {"context": "...", "target": "word"}
//                     reports acc (the target is the greedy continuation) and perplexity
//                     exp(-mean log-likelihood of the target)                       lambada
//
// "target_delimiter" (optional, default " ") goes between context and continuation; other fields
// are ignored. Contexts and continuations are tokenized as lm-eval does: trailing whitespace of
// the context moves to the continuation, the pair is encoded whole and the continuation is what
// follows the context's own encoding. The model sees the tokenizer's document separator first
// (promptIds in ruler.h), so no context is empty.
#pragma once

#include "data/data.h"
#include "tasks/language_model.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace linac::tasks {

enum class ZeroShotKind { MultipleChoice, PartialContext, LastWord };

struct ZeroShotDoc {
  std::vector<std::string> contexts;       // one, or one per choice (partial context)
  std::vector<std::string> continuations;  // one per choice, or one (partial context, last word)
  std::string delimiter = " ";
  int64_t gold = 0;
};

struct ZeroShotTask {
  std::string name;
  ZeroShotKind kind = ZeroShotKind::MultipleChoice;
  std::vector<ZeroShotDoc> docs;
};

/// Reads `path`; throws data::DataError naming path:line for a malformed line, a line of
/// another kind than the first, a gold index out of range or an empty file.
ZeroShotTask loadZeroShotTask(const std::string& path, const std::string& name);

/// lm-eval's context/continuation split (see above), with the separator before the context.
ContinuationRequest encodePair(const data::Tokenizer& tokenizer, const std::string& context,
                               const std::string& continuation);

struct ZeroShotOptions {
  int64_t limit = 0;   // the first `limit` documents; 0 = all
  int64_t batch = 16;  // documents per score() call
  std::ostream* progress = nullptr;
  double progressEverySeconds = 5;
};

struct ZeroShotResult {
  std::string task;
  ZeroShotKind kind = ZeroShotKind::MultipleChoice;
  int64_t examples = 0;
  double acc = 0;
  std::optional<double> accNorm;     // multiple choice
  std::optional<double> perplexity;  // last word
  double seconds = 0;
};

ZeroShotResult runZeroShot(LanguageModel& model, const data::Tokenizer& tokenizer, const ZeroShotTask& task,
                           const ZeroShotOptions& options);

}  // namespace linac::tasks
