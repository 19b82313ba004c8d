#include "Sweep.h"

#include "linac/Spec/SpecParser.h"
#include "trainer/file_io.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace linac::cli {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kTransformer = "transformer";

std::string fileStem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

std::string withSeed(std::string name, int64_t seed, bool severalSeeds) {
  return severalSeeds ? name + "-seed" + std::to_string(seed) : name;
}

/// Whole JSON objects of a JSON-lines file (a line cut short by a kill is skipped).
std::vector<nlohmann::json> readJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(trainer::detail::readFileIfExists(path).value_or(""));
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

std::optional<nlohmann::json> readJson(const std::string& path) {
  auto text = trainer::detail::readFileIfExists(path);
  if (!text) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

/// A task name as a column-name part: "ruler/niah_single_1" -> "ruler_niah_single_1".
std::string column(std::string name) {
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

/// Layers and attention layers of the run (model.json's preset and schedule).
void addShape(Json& row, const nlohmann::json& model) {
  const int64_t layers = model["preset"].value("layers", int64_t(0));
  const std::string text = model["schedule"].value("text", "");
  std::string error;
  if (auto attention = spec::expandScheduleText(text, layers, error)) {
    const int64_t n = std::count(attention->begin(), attention->end(), true);
    row["layers"] = layers;
    row["attention_layers"] = n;
    row["attention_share"] = layers > 0 ? double(n) / double(layers) : 0.0;
  }
}

/// Training: the last logged loss, the last throughput, steps done.
void addTraining(Json& row, const std::string& runDir) {
  for (const auto& m : readJsonLines(runDir + "/metrics.jsonl")) {
    if (m.contains("loss") && m["loss"].is_number()) {
      row["steps_done"] = m.value("step", int64_t(0));
      row["train_loss"] = m["loss"];
      if (m.contains("tokens_per_s")) row["tokens_per_s"] = m["tokens_per_s"];
      if (m.contains("elapsed")) row["train_seconds"] = m["elapsed"];
    }
  }
}

/// eval.jsonl: the scores of the newest evaluated step; a task evaluated twice keeps its last line.
void addScores(Json& row, const std::string& runDir) {
  const auto lines = readJsonLines(runDir + "/eval.jsonl");
  int64_t step = -1;
  for (const auto& l : lines) step = std::max(step, l.value("step", int64_t(-1)));
  std::map<int64_t, double> mqar;
  for (const auto& l : lines) {
    if (l.value("step", int64_t(-1)) != step || !l.contains("task")) continue;
    const std::string task = l["task"];
    if (task == "ppl") {
      row["ppl"] = l["ppl"];
      row["eval_loss"] = l["loss"];
    } else if (task == "mqar") {
      const int64_t pairs = l.value("pairs", int64_t(0));
      mqar[pairs] = l.value("accuracy", 0.0);
      row["mqar_" + std::to_string(pairs)] = l["accuracy"];
    } else if (task.rfind("ruler/", 0) == 0) {
      if (!l.contains("score")) continue;  // did not fit the context
      const std::string name = task == "ruler/average" ? "ruler" : column(task);
      row[name + "_" + std::to_string(l.value("context", int64_t(0)))] = l["score"];
    } else {
      for (const char* metric : {"acc", "acc_norm", "perplexity"})
        if (l.contains(metric)) row[column(task) + "_" + metric] = l[metric];
    }
  }
  if (!mqar.empty()) {
    double sum = 0;
    for (const auto& [pairs, accuracy] : mqar) sum += accuracy;
    row["mqar"] = sum / double(mqar.size());
  }
  if (step >= 0) row["eval_step"] = step;
}

std::string csvField(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string quoted = "\"";
    for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }
  return v.dump();
}

}  // namespace

Json SweepSettings::toJson() const {
  return Json{{"preset", preset},         {"steps", steps},         {"tasks", tasks},
              {"device", device},         {"train_args", trainArgs}, {"eval_args", evalArgs},
              {"memory_context", memoryContext}};
}

std::string scheduleSlug(const std::string& schedule) {
  const size_t colon = schedule.find(':');
  if (colon != std::string::npos) return schedule.substr(0, colon) + "to" + schedule.substr(colon + 1);
  if (!schedule.empty() && std::isdigit(static_cast<unsigned char>(schedule[0]))) {
    std::string slug = "attn";
    for (char c : schedule)
      if (std::isdigit(static_cast<unsigned char>(c))) slug += c;
      else if (slug.back() != '_') slug += '_';
    return slug;
  }
  std::string slug;
  for (char c : schedule) slug += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return slug;
}

std::vector<SweepCell> planCells(const SweepGrid& grid) {
  std::vector<SweepCell> cells;
  const bool severalSeeds = grid.seeds.size() > 1;
  const bool transformer =
      std::find(grid.schedules.begin(), grid.schedules.end(), kTransformer) != grid.schedules.end();
  for (const auto& spec : grid.specs)
    for (const auto& schedule : grid.schedules) {
      if (schedule == kTransformer) continue;
      for (int64_t seed : grid.seeds)
        cells.push_back({withSeed(fileStem(spec) + "-" + scheduleSlug(schedule), seed, severalSeeds), spec,
                         fileStem(spec), schedule, seed});
    }
  if (transformer && !grid.specs.empty())
    for (int64_t seed : grid.seeds)
      cells.push_back({withSeed(kTransformer, seed, severalSeeds), grid.specs.front(), kTransformer, kTransformer, seed});
  return cells;
}

Json cellResults(const SweepCell& cell, const std::string& cellDir) {
  Json row{{"cell", cell.name}, {"variant", cell.variant}, {"schedule", cell.schedule}, {"seed", cell.seed}};
  const auto state = readJson(cellDir + "/cell.json");
  row["status"] = state ? state->value("status", "unknown") : "not run";
  if (state && state->contains("seconds")) row["seconds"] = (*state)["seconds"];
  const std::string runDir = cellDir + "/run";
  if (auto model = readJson(runDir + "/model.json")) addShape(row, *model);
  addTraining(row, runDir);
  if (auto memory = readJson(cellDir + "/memory.json"); memory && memory->contains("total")) {
    row["memory_context"] = (*memory)["context"];
    row["cache_bytes"] = (*memory)["total"]["total"];
    row["cache_share_of_transformer"] = (*memory)["share_of_transformer"];
  }
  addScores(row, runDir);
  return row;
}

void writeResults(const std::string& dir, const std::vector<Json>& rows) {
  trainer::detail::writeFileAtomically(dir + "/results.json", Json(rows).dump(2) + "\n");
  std::vector<std::string> columns;
  std::set<std::string> seen;
  for (const auto& row : rows)
    for (const auto& [key, value] : row.items())
      if (seen.insert(key).second) columns.push_back(key);
  std::string csv;
  for (size_t i = 0; i < columns.size(); ++i) csv += (i ? "," : "") + columns[i];
  csv += "\n";
  for (const auto& row : rows) {
    for (size_t i = 0; i < columns.size(); ++i)
      csv += (i ? "," : "") + (row.contains(columns[i]) ? csvField(row[columns[i]]) : std::string());
    csv += "\n";
  }
  trainer::detail::writeFileAtomically(dir + "/results.csv", csv);
}

}  // namespace linac::cli
