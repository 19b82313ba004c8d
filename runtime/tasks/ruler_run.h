// Running RULER (ruler.h) on a model: every task at every context length, examples generated in
// batches, each answer scored by its task's string match after detokenizing.
#pragma once

#include "tasks/language_model.h"
#include "tasks/ruler.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace linac::tasks {

struct RulerOptions {
  std::vector<std::string> tasks;  // empty: every task of rulerTasks()
  std::vector<int64_t> contexts;   // context lengths in tokens
  int64_t examples = 0;            // per task and context
  uint64_t seed = 0;
  int64_t batch = 8;               // prompts per generate() call
  std::ostream* progress = nullptr;
  double progressEverySeconds = 5;
};

struct RulerScore {
  std::string task;
  int64_t context = 0;
  int64_t examples = 0;        // 0 when the task does not fit
  double score = 0;            // mean string-match score, percent
  int64_t neededTokens = 0;    // when it does not fit: what its smallest prompt + maxNew takes
  double seconds = 0;
  bool fits() const { return examples > 0; }
};

/// One score per (context, task), contexts outer. Generation stops early at the tokenizer's
/// document separator (the end of a document).
std::vector<RulerScore> runRuler(LanguageModel& model, const RulerSetup& setup, const RulerOptions& options);

/// The mean over the tasks that fit at `context` and how many did (0 -> mean 0).
std::pair<double, int64_t> rulerAverage(const std::vector<RulerScore>& scores, int64_t context);

}  // namespace linac::tasks
