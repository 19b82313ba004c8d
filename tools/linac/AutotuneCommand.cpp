// `linac autotune [--cache FILE] [--json] [--clear]`: the CUDA kernels' timed choices
// (runtime/kernels/cuda/autotune.h) as the autotune cache records them: per build, GPU, choice
// point and shape class, the candidate that ran fastest and every candidate's time. --clear
// deletes the file, so that the next run times again (after a driver or clock change, say).
#include "Commands.h"

#include "kernels/common/autotune_cache.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <system_error>

namespace linac::cli {
namespace {

struct AutotuneFlags {
  std::string cache;  // "" = the default path
  bool json = false;
  bool clear = false;
};

int runAutotune(const AutotuneFlags& flags) {
  const std::string path = flags.cache.empty() ? kernels::AutotuneCache::defaultPath() : flags.cache;
  if (path.empty())
    throw UsageError("no autotune cache path: set LINAC_AUTOTUNE_CACHE, XDG_CACHE_HOME or HOME, or pass --cache");
  const std::vector<kernels::TuneRecord> records = kernels::readTuneRecords(path);
  if (flags.clear) {
    std::error_code error;
    const bool removed = std::filesystem::remove(path, error);
    if (error) throw std::runtime_error("cannot delete " + path + ": " + error.message());
    std::cout << (removed ? "deleted " : "nothing to delete: no ") << path << " (" << records.size()
              << " recorded choice" << (records.size() == 1 ? "" : "s") << ")\n";
    return 0;
  }
  if (flags.json) {
    for (const kernels::TuneRecord& r : records)
      std::cout << nlohmann::ordered_json{{"build", r.key.build}, {"gpu", r.key.gpu}, {"point", r.key.point},
                                          {"shape", r.key.shape}, {"choice", r.choice}, {"times_ms", r.times_ms}}
                       .dump()
                << "\n";
    return 0;
  }
  std::cout << "autotune cache: " << path << " (" << records.size() << " recorded choice"
            << (records.size() == 1 ? "" : "s") << ")\n";
  if (records.empty()) {
    std::cout << "nothing recorded yet: the CUDA kernels time their choices on the first call of each shape class\n";
    return 0;
  }
  size_t pointWidth = 12, shapeWidth = 11;
  for (const kernels::TuneRecord& r : records) {
    pointWidth = std::max(pointWidth, r.key.point.size());
    shapeWidth = std::max(shapeWidth, r.key.shape.size());
  }
  std::string gpu, build;
  for (const kernels::TuneRecord& r : records) {
    if (r.key.gpu != gpu || r.key.build != build) {
      gpu = r.key.gpu;
      build = r.key.build;
      std::cout << "\n" << gpu << ", build " << build << "\n"
                << "  " << std::left << std::setw(int(pointWidth)) << "choice point" << "  "
                << std::setw(int(shapeWidth)) << "shape class" << "  chosen    timings (ms)\n";
    }
    std::cout << "  " << std::left << std::setw(int(pointWidth)) << r.key.point << "  "
              << std::setw(int(shapeWidth)) << r.key.shape << "  " << std::setw(8) << r.choice << "  "
              << r.times_ms << "\n";
  }
  return 0;
}

}  // namespace

Command addAutotuneCommand(CLI::App& root) {
  CLI::App* app = root.add_subcommand(
      "autotune", "the CUDA kernels' timed choices (per GPU, choice point and shape class), or --clear them");
  auto flags = std::make_shared<AutotuneFlags>();
  app->add_option("--cache", flags->cache,
                  "the cache file (default: LINAC_AUTOTUNE_CACHE, else ~/.cache/linac/autotune.tsv)");
  app->add_flag("--json", flags->json, "one JSON object per recorded choice");
  app->add_flag("--clear", flags->clear, "delete the cache file: the next run times its choices again");
  return {app, [flags](const std::vector<std::string>&) { return runAutotune(*flags); }};
}

}  // namespace linac::cli
