// The evaluation tasks of `linac eval` beyond ppl and mqar (runtime/tasks): which of the --tasks
// names are RULER tasks and which are zero-shot task files, the RULER haystack, running both with
// progress on stderr and tables on stdout, and the JSON lines for the run's eval.jsonl. Independent
// of the command-line parser.
#pragma once

#include "data/data.h"
#include "tasks/language_model.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace linac::cli {

struct TaskPlan {
  bool ppl = false, mqar = false;
  std::vector<std::string> ruler;     // RULER tasks, in RULER's order
  std::vector<std::string> zeroShot;  // TASK_DIR/NAME.jsonl, in the order given
};

/// --tasks names: ppl, mqar, ruler (its eleven tasks) or one RULER task, else a zero-shot task
/// file taskDir/NAME.jsonl. Throws std::invalid_argument (a usage error) for a zero-shot name
/// without taskDir or without its file.
TaskPlan planTasks(const std::vector<std::string>& names, const std::string& taskDir);

/// The essay haystack's words: `haystackFile`'s text, else the run's corpus (config.json's
/// data source: "embedded" or a path, read as training read it and decoded).
std::vector<std::string> haystackWords(const std::string& haystackFile, const std::string& dataSource,
                                       const data::Tokenizer& tokenizer);

struct TaskSettings {
  std::vector<int64_t> contexts;  // RULER context lengths
  int64_t examples = 0;           // RULER examples per task and context
  uint64_t seed = 0;
  int64_t limit = 0;              // zero-shot documents per task; 0 = all
  int64_t batch = 8;
  std::string taskDir;
};

/// Runs the plan's RULER and zero-shot tasks; returns their JSON lines (report.h).
std::vector<nlohmann::ordered_json> runTasks(const TaskPlan& plan, const TaskSettings& settings,
                                             tasks::LanguageModel& model, const data::Tokenizer& tokenizer,
                                             const std::vector<std::string>& haystack);

}  // namespace linac::cli
