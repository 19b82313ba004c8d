#include "EvalTasks.h"

#include "data/token_shards.h"
#include "tasks/report.h"
#include "tasks/ruler.h"
#include "tasks/ruler_run.h"
#include "tasks/zero_shot.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <sys/stat.h>

namespace linac::cli {
namespace {

constexpr double kProgressEverySeconds = 5;
/// Ids read from the start of a token shard set for the RULER haystack (cycled when short).
constexpr int64_t kHaystackShardTokens = int64_t{1} << 20;

bool isFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool isRulerTask(const std::string& name) {
  const auto& all = tasks::rulerTasks();
  return std::any_of(all.begin(), all.end(), [&](const tasks::RulerTaskInfo& t) { return t.name == name; });
}

}  // namespace

TaskPlan planTasks(const std::vector<std::string>& names, const std::string& taskDir) {
  TaskPlan plan;
  std::vector<std::string> ruler;
  for (const std::string& name : names) {
    if (name == "ppl") {
      plan.ppl = true;
    } else if (name == "mqar") {
      plan.mqar = true;
    } else if (name == "ruler") {
      for (const tasks::RulerTaskInfo& t : tasks::rulerTasks()) ruler.push_back(t.name);
    } else if (isRulerTask(name)) {
      ruler.push_back(name);
    } else {
      if (taskDir.empty())
        throw std::invalid_argument("--tasks " + name + ": not ppl, mqar, ruler or a RULER task, so a zero-shot task "
                                    "file: give --task-dir DIR holding " + name + ".jsonl (README.md, \"Evaluation "
                                    "tasks\"; format samples in runtime/tasks/samples)");
      if (!isFile(taskDir + "/" + name + ".jsonl"))
        throw std::invalid_argument("--tasks " + name + ": no " + taskDir + "/" + name + ".jsonl");
      if (std::find(plan.zeroShot.begin(), plan.zeroShot.end(), name) == plan.zeroShot.end()) plan.zeroShot.push_back(name);
    }
  }
  for (const tasks::RulerTaskInfo& t : tasks::rulerTasks())  // RULER's order, once each
    if (std::find(ruler.begin(), ruler.end(), t.name) != ruler.end()) plan.ruler.push_back(t.name);
  return plan;
}

std::vector<std::string> haystackWords(const std::string& haystackFile, const std::string& dataSource,
                                       const data::Tokenizer& tokenizer) {
  std::string text;
  if (!haystackFile.empty()) {
    std::ifstream in(haystackFile, std::ios::binary);
    if (!in) throw std::invalid_argument("--haystack: cannot read " + haystackFile);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    text = bytes.str();
  } else if (dataSource.empty() || dataSource == "embedded") {
    for (const std::string& doc : data::defaultCorpusDocuments()) text += doc + "\n";
  } else {
    // Token shards: their first kHaystackShardTokens ids (a haystack needs no more), not the set.
    std::vector<int64_t> ids;
    if (data::isTokenShardPath(dataSource)) {
      const auto shards = data::TokenShards::open(dataSource);
      ids.resize(size_t(std::min(shards->tokens(), kHaystackShardTokens)));
      shards->read(0, int64_t(ids.size()), ids.data());
    } else {
      ids = data::loadCorpus(dataSource, tokenizer, 0.0).train;
    }
    tasks::TokenIds document;
    for (int64_t id : ids) {
      if (id == tokenizer.documentSeparator()) {
        text += tokenizer.decode(document) + "\n";
        document.clear();
      } else {
        document.push_back(id);
      }
    }
    text += tokenizer.decode(document);
  }
  std::vector<std::string> words = tasks::splitWords(text);
  if (words.empty()) throw std::invalid_argument("the RULER haystack text (" + (haystackFile.empty() ? dataSource : haystackFile) + ") is empty");
  return words;
}

std::vector<nlohmann::ordered_json> runTasks(const TaskPlan& plan, const TaskSettings& settings,
                                             tasks::LanguageModel& model, const data::Tokenizer& tokenizer,
                                             const std::vector<std::string>& haystack) {
  std::vector<nlohmann::ordered_json> lines;
  if (!plan.ruler.empty()) {
    tasks::RulerOptions options;
    options.tasks = plan.ruler;
    options.contexts = settings.contexts;
    options.examples = settings.examples;
    options.seed = settings.seed;
    options.batch = settings.batch;
    options.progress = &std::cerr;
    options.progressEverySeconds = kProgressEverySeconds;
    const std::vector<tasks::RulerScore> scores = tasks::runRuler(model, tasks::RulerSetup{&tokenizer, haystack}, options);
    tasks::printRulerTable(std::cout, scores);
    for (auto& j : tasks::rulerJson(scores)) lines.push_back(std::move(j));
  }
  if (!plan.zeroShot.empty()) {
    std::vector<tasks::ZeroShotResult> results;
    tasks::ZeroShotOptions options;
    options.limit = settings.limit;
    options.batch = settings.batch;
    options.progress = &std::cerr;
    options.progressEverySeconds = kProgressEverySeconds;
    for (const std::string& name : plan.zeroShot) {
      const tasks::ZeroShotTask task = tasks::loadZeroShotTask(settings.taskDir + "/" + name + ".jsonl", name);
      results.push_back(tasks::runZeroShot(model, tokenizer, task, options));
      lines.push_back(tasks::zeroShotJson(results.back()));
    }
    tasks::printZeroShotTable(std::cout, results);
  }
  return lines;
}

}  // namespace linac::cli
