// Reporting task results: tables for the terminal and JSON objects for the run directory's eval
// results file (one per line, appended).
#pragma once

#include "tasks/ruler_run.h"
#include "tasks/zero_shot.h"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

namespace linac::tasks {

/// Tasks down, context lengths across, scores in percent ("-" where a task does not fit), and an
/// average row over the tasks that fit (with their count when some did not).
void printRulerTable(std::ostream& out, const std::vector<RulerScore>& scores);
/// One row per task: examples, acc, acc_norm, perplexity ("-" where the task has none).
void printZeroShotTable(std::ostream& out, const std::vector<ZeroShotResult>& results);

/// {"task": "ruler/<name>", "context", "examples", "score", "metric", "seconds"} or, when it does
/// not fit, {"task", "context", "fits": false, "needed_tokens"}; then one {"task": "ruler/average",
/// "context", "score", "tasks"} per context length.
std::vector<nlohmann::ordered_json> rulerJson(const std::vector<RulerScore>& scores);
/// {"task", "examples", "acc", "acc_norm" | "perplexity", "seconds"}.
nlohmann::ordered_json zeroShotJson(const ZeroShotResult& result);

/// Appends each object as one line to `path` (created if missing) and fsyncs it; throws
/// std::runtime_error naming the path on failure.
void appendJsonLines(const std::string& path, const std::vector<nlohmann::ordered_json>& lines);

}  // namespace linac::tasks
