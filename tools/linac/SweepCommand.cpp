// `linac sweep --specs A.yaml,B.yaml --schedules 3:1,pure,transformer --preset P --steps N`: the
// study's grid as one resumable folder (Sweep.h). Each cell trains with `linac train` and is scored
// with `linac eval` in child processes (Subprocess.h); finished cells are skipped on a re-run, a
// failed cell is reported and the rest go on. Then results.csv / results.json and the plots.
// Exit codes: 0 every cell done, 1 a cell failed, 2 usage, 128 + signal stopped.
#include "Commands.h"
#include "Subprocess.h"
#include "Sweep.h"

#include "trainer/file_io.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <unistd.h>

namespace linac::cli {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kDefaultSchedules = "3:1,pure,transformer";
constexpr const char* kDefaultTasks = "ppl,mqar";
constexpr const char* kDefaultOut = "runs/sweep";
constexpr int64_t kDefaultSteps = 300;  // linac train's own default
constexpr int kSweepFormat = 1;         // sweep.json's "linac_sweep"
constexpr int64_t kDefaultMemoryContext = 4096;  // tokens at which each cell's cache is sized

struct SweepFlags {
  std::string specs;
  std::string schedules = kDefaultSchedules;
  std::string preset = "tiny";
  int64_t steps = kDefaultSteps;
  std::string out = kDefaultOut;
  std::string tasks = kDefaultTasks;
  std::vector<int64_t> seeds = {1};
  std::string device = "auto";
  std::string trainArgs, evalArgs;
  std::string plots = "on";
  int64_t memoryContext = kDefaultMemoryContext;
};

/// Words of a --train-args / --eval-args value, split at spaces.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ' ');)
    if (!part.empty()) out.push_back(part);
  return out;
}

std::string absolutePath(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) throw UsageError("cannot find " + path + ": " + std::strerror(errno));
  return buf;
}

std::string duration(double seconds) {
  const int64_t s = int64_t(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s % 3600) / 60 << "m";
  else if (s >= 60) out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else out << s << "s";
  return out.str();
}

/// sweep.json: a new folder takes this sweep's settings; an existing one must have the same
/// settings (its grid may grow: the specs, schedules and seeds are the union).
SweepGrid reconcile(const std::string& dir, const SweepSettings& settings, SweepGrid grid) {
  const std::string path = dir + "/sweep.json";
  const Json wanted = settings.toJson();
  if (auto text = trainer::detail::readFileIfExists(path)) {
    const Json stored = Json::parse(*text, nullptr, false);
    if (stored.is_discarded() || !stored.contains("settings"))
      throw UsageError(path + " is not a linac sweep file; give another --out");
    std::string diffs;
    for (const auto& [key, value] : wanted.items())
      if (stored["settings"].value(key, Json()) != value)
        diffs += "\n  " + key + ": " + stored["settings"].value(key, Json()).dump() + " in the sweep, " +
                 value.dump() + " now";
    if (!diffs.empty())
      throw UsageError("the sweep in " + dir + " was run with other settings:" + diffs +
                       "\ngive the same settings to continue it, or another --out for a new sweep");
    auto merge = [](auto& into, const auto& more) {
      for (const auto& x : more)
        if (std::find(into.begin(), into.end(), x) == into.end()) into.push_back(x);
    };
    SweepGrid all;
    merge(all.specs, stored.value("specs", std::vector<std::string>{}));
    merge(all.schedules, stored.value("schedules", std::vector<std::string>{}));
    merge(all.seeds, stored.value("seeds", std::vector<int64_t>{}));
    merge(all.specs, grid.specs);
    merge(all.schedules, grid.schedules);
    merge(all.seeds, grid.seeds);
    grid = all;
  }
  Json file{{"linac_sweep", kSweepFormat}, {"settings", wanted}, {"specs", grid.specs},
            {"schedules", grid.schedules}, {"seeds", grid.seeds}};
  trainer::detail::writeFileAtomically(path, file.dump(2) + "\n");
  return grid;
}

std::string lastLine(const std::string& path) {
  std::istringstream in(trainer::detail::readFileIfExists(path).value_or(""));
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

void writeCellState(const std::string& cellDir, const std::string& status, const std::string& stage, int code,
                    double seconds) {
  Json j{{"status", status}, {"seconds", seconds}};
  if (!stage.empty()) {
    j["stage"] = stage;
    j["exit_code"] = code;
  }
  trainer::detail::writeFileAtomically(cellDir + "/cell.json", j.dump(2) + "\n");
}

/// "loss 2.31 | ppl 10.1 | mqar 0.45 | ruler@1024 12.0": the headline numbers of a results row.
std::string headline(const Json& row) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3);
  auto add = [&](const char* label, const char* key) {
    if (row.contains(key) && row[key].is_number()) out << " | " << label << " " << row[key].get<double>();
  };
  add("loss", "train_loss");
  add("ppl", "ppl");
  add("mqar", "mqar");
  for (const auto& [key, value] : row.items())
    if (key.rfind("ruler_", 0) == 0 && key.find_first_not_of("0123456789", 6) == std::string::npos)
      out << " | ruler@" << key.substr(6) << " " << value.get<double>();
  return out.str();
}

/// The plotting script: installed beside the binary (share/linac) or in the source tree.
std::string plotScript() {
  const std::string exe = selfExecutable();
  const std::string installed = exe.substr(0, exe.find_last_of('/')) + "/../share/linac/sweep_plots.py";
  if (trainer::detail::pathExists(installed)) return installed;
  return std::string(LINAC_SOURCE_DIR) + "/tools/sweep_plots.py";
}

int runSweep(const SweepFlags& f) {
  SweepGrid grid;
  for (const auto& s : splitList(f.specs, ',', "--specs")) grid.specs.push_back(absolutePath(s));
  grid.schedules = splitList(f.schedules, ',', "--schedules");
  grid.seeds = f.seeds;
  if (grid.seeds.empty()) throw UsageError("--seeds needs at least one seed");
  const std::string& plots = f.plots;

  SweepSettings settings;
  settings.preset = f.preset;
  settings.steps = f.steps;
  settings.tasks = f.tasks;
  splitList(f.tasks, ',', "--tasks");  // an empty entry: a usage error here, not a failed eval in each cell
  settings.device = f.device == "auto" ? "" : f.device;  // auto: each cell's own default
  settings.trainArgs = words(f.trainArgs);
  settings.evalArgs = words(f.evalArgs);
  settings.memoryContext = f.memoryContext;
  if (settings.steps < 1) throw UsageError("--steps must be >= 1");
  if (settings.memoryContext < 1) throw UsageError("--memory-context must be >= 1");

  const std::string& dir = f.out;
  trainer::detail::makeDirectories(dir + "/cells");
  grid = reconcile(dir, settings, grid);
  const std::vector<SweepCell> cells = planCells(grid);
  const std::string self = selfExecutable();
  std::cout << "linac sweep: " << cells.size() << " cells in " << dir << " (" << settings.preset << ", "
            << settings.steps << " steps, tasks " << settings.tasks << ")" << std::endl;

  std::vector<Json> rows;
  int failed = 0, ran = 0, stoppedBy = 0;
  double ranSeconds = 0;
  for (size_t i = 0; i < cells.size(); ++i) {
    const SweepCell& cell = cells[i];
    const std::string cellDir = dir + "/cells/" + cell.name, runDir = cellDir + "/run";
    const std::string tag = "[" + std::to_string(i + 1) + "/" + std::to_string(cells.size()) + "] " + cell.name;
    trainer::detail::makeDirectories(cellDir);
    Json before = cellResults(cell, cellDir);
    if (before["status"] == "done") {
      std::cout << tag << ": done earlier" << headline(before) << std::endl;
      rows.push_back(std::move(before));
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    std::vector<std::string> train = {self, "train", cell.spec, "--schedule", cell.schedule, "--preset",
                                      settings.preset, "--steps", std::to_string(settings.steps), "--seed",
                                      std::to_string(cell.seed), "--out", runDir};
    if (trainer::detail::pathExists(runDir + "/latest")) train.push_back("--resume");      // a failed or stopped cell continues
    else if (trainer::detail::pathExists(runDir)) train.push_back("--overwrite");          // it never reached a checkpoint
    std::vector<std::string> eval = {self, "eval", runDir, "--tasks", settings.tasks};
    if (!settings.device.empty()) {
      for (auto* v : {&train, &eval}) v->insert(v->end(), {"--device", settings.device});
    }
    train.insert(train.end(), settings.trainArgs.begin(), settings.trainArgs.end());
    eval.insert(eval.end(), settings.evalArgs.begin(), settings.evalArgs.end());

    std::string failedStage;
    ChildExit result;
    for (const auto& [stage, command] : {std::pair{"train", train}, std::pair{"eval", eval}}) {
      result = runLogged(command, cellDir + "/" + stage + ".log");
      if (result.stopSignal || result.code != 0) {
        failedStage = stage;
        break;
      }
    }
    if (result.stopSignal) {
      writeCellState(cellDir, "stopped", failedStage, result.code, seconds());
      std::cout << tag << ": stopped (signal " << result.stopSignal << "); run the same command to continue"
                << std::endl;
      stoppedBy = result.stopSignal;
      rows.push_back(cellResults(cell, cellDir));
      break;
    }
    ++ran;
    ranSeconds += seconds();
    if (!failedStage.empty()) {
      ++failed;
      writeCellState(cellDir, "failed", failedStage, result.code, seconds());
      std::cout << tag << ": FAILED in " << failedStage << " (exit " << result.code << ", " << duration(seconds())
                << "): " << lastLine(cellDir + "/" + failedStage + ".log") << "\n    log: " << cellDir << "/"
                << failedStage << ".log" << std::endl;
    } else {
      writeCellState(cellDir, "done", "", 0, seconds());
      // The cell's state + KV-cache bytes at --memory-context (`linac memory --json`).
      const std::string memory = cellDir + "/memory.json";
      ::unlink(memory.c_str());
      const ChildExit sized = runLogged({self, "memory", cell.spec, "--schedule", cell.schedule, "--preset",
                                         settings.preset, "--context", std::to_string(settings.memoryContext),
                                         "--json"},
                                        memory);
      if (sized.code != 0) std::cout << tag << ": no memory figure (" << lastLine(memory) << ")" << std::endl;
    }
    Json row = cellResults(cell, cellDir);
    if (failedStage.empty()) std::cout << tag << ": done in " << duration(seconds()) << headline(row) << std::endl;
    rows.push_back(std::move(row));
    const size_t left = cells.size() - i - 1;
    if (left > 0)
      std::cout << "    progress: " << i + 1 << " of " << cells.size() << " cells, " << failed << " failed, eta "
                << duration(ranSeconds / ran * double(left)) << std::endl;
  }
  for (size_t i = rows.size(); i < cells.size(); ++i) rows.push_back(cellResults(cells[i], dir + "/cells/" + cells[i].name));
  writeResults(dir, rows);
  std::cout << "results: " << dir << "/results.csv, " << dir << "/results.json" << std::endl;

  if (plots == "on" && !stoppedBy) {
    const ChildExit plotted = runLogged({"/usr/bin/env", "python3", plotScript(), dir}, dir + "/plots.log");
    if (plotted.code == 0) std::cout << "plots: " << dir << "/plots/" << std::endl;
    else std::cout << "plots: not drawn (" << lastLine(dir + "/plots.log") << ")" << std::endl;
  }
  if (stoppedBy) return 128 + stoppedBy;
  if (failed) {
    std::cout << failed << " of " << cells.size() << " cells failed; run the same command to retry them" << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace

Command addSweepCommand(CLI::App& root) {
  auto f = std::make_shared<SweepFlags>();
  CLI::App* app = root.add_subcommand("sweep", "train and evaluate a grid of specs x schedules x seeds as one "
                                               "resumable folder; results table and plots");
  app->add_option("--specs", f->specs, "comma-separated linear variant specs (YAML)")->required();
  app->add_option("--schedules", f->schedules, "comma-separated schedules")->capture_default_str();
  app->add_option("--preset", f->preset, "the model size of every cell")->capture_default_str();
  app->add_option("--steps", f->steps, "training steps of every cell")->capture_default_str();
  app->add_option("--out", f->out, "the sweep folder (a re-run continues it)")->capture_default_str();
  app->add_option("--tasks", f->tasks, "comma-separated `linac eval` tasks scored for every cell")
      ->capture_default_str();
  addIntListOption(*app, "--seeds", f->seeds, "comma-separated training seeds");
  addDeviceOption(*app, f->device);
  app->add_option("--train-args", f->trainArgs, "more `linac train` flags for every cell, space-separated");
  app->add_option("--eval-args", f->evalArgs, "more `linac eval` flags for every cell, space-separated");
  app->add_option("--plots", f->plots, "draw the plots (python3 with matplotlib)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app->add_option("--memory-context", f->memoryContext, "tokens at which each cell's cache bytes are computed")
      ->capture_default_str();
  return {app, [f](const std::vector<std::string>&) { return runSweep(*f); }};
}

}  // namespace linac::cli
