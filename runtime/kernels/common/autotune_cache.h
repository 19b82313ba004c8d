// The on-disk record of the kernels' measured choices (kernels/cuda/autotune.h). Where a kernel
// entry has several correct ways to run a call and no heuristic decides which is fastest on a GPU
// for a shape, it times each once per (build, GPU, choice point, shape class) and records the
// winner here, so later calls and later processes take it without timing again.
//
// One line per choice, tab-separated; lines are appended, never rewritten, and a later line for
// the same key overrides an earlier one:
//   build <TAB> gpu <TAB> point <TAB> shape class <TAB> choice <TAB> candidate=ms,candidate=ms,...
// for example
//   3f2a9c1d0e11	NVIDIA H200 (132 SMs)	delta_backward.reverse	bf16 scalar dk128 dv128 nh64 t4096	fused	staged=1.231,fused=0.982
// Lines starting with '#' and lines that do not parse are skipped. Each line is appended with one
// write(2) on an O_APPEND descriptor, so ranks of one job may share the file.
// Plain C++ (no CUDA, no torch): the CPU tests check it, and `linac emit` packages carry it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace linac::kernels {

/// What a recorded choice is keyed by. No field may hold a tab or a newline (tuneField()).
struct TuneKey {
  std::string build;  // the kernels' build (commit or package version): a new build times again
  std::string gpu;    // the device's name and SM count
  std::string point;  // the choice point, e.g. "delta_backward.reverse"
  std::string shape;  // the shape class, e.g. "bf16 scalar dk128 dv128 nh64 t4096"

  std::string text() const { return build + '\t' + gpu + '\t' + point + '\t' + shape; }
};

/// A timed choice: the winning candidate and every candidate's median time.
struct TuneResult {
  std::string choice;
  std::vector<std::pair<std::string, double>> times_ms;
};

/// `text` with tabs and line breaks replaced by spaces, fit for one field of a cache line.
inline std::string tuneField(std::string text) {
  for (char& c : text)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return text;
}

/// The cache line of `result` under `key`, without its newline.
inline std::string formatTuneLine(const TuneKey& key, const TuneResult& result) {
  std::ostringstream line;
  line << key.text() << '\t' << result.choice << '\t';
  for (size_t i = 0; i < result.times_ms.size(); ++i) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.4f", result.times_ms[i].second);
    line << (i ? "," : "") << result.times_ms[i].first << '=' << ms;
  }
  return line.str();
}

/// The key text and the choice of one cache line, or nothing for a comment or a malformed line.
inline std::optional<std::pair<std::string, std::string>> parseTuneLine(const std::string& line) {
  if (line.empty() || line[0] == '#') return std::nullopt;
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, '\t')) fields.push_back(field);
  if (fields.size() != 6) return std::nullopt;
  for (const std::string& f : fields)
    if (f.empty()) return std::nullopt;
  const TuneKey key{fields[0], fields[1], fields[2], fields[3]};
  return std::make_pair(key.text(), fields[4]);
}

/// One cache line as read back: its key, the choice and the candidates' timings as written.
struct TuneRecord {
  TuneKey key;
  std::string choice;
  std::string times_ms;  // "candidate=ms,candidate=ms,..."
};

/// The records of the cache file at `path`, the latest per key, in the order their keys first
/// appear (none when the file does not exist; comments and malformed lines skipped).
inline std::vector<TuneRecord> readTuneRecords(const std::string& path) {
  std::vector<TuneRecord> records;
  std::map<std::string, size_t> index;  // key text -> position in records
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!parseTuneLine(line)) continue;
    std::vector<std::string> f;
    std::string field;
    std::istringstream fields(line);
    while (std::getline(fields, field, '\t')) f.push_back(field);
    TuneRecord record{{f[0], f[1], f[2], f[3]}, f[4], f[5]};
    const auto [at, fresh] = index.emplace(record.key.text(), records.size());
    if (fresh) records.push_back(std::move(record));
    else records[at->second] = std::move(record);
  }
  return records;
}

/// The recorded choices of one cache file, kept in memory; record() appends to the file.
class AutotuneCache {
 public:
  /// Reads `path` when it exists; "" keeps every choice in memory only.
  explicit AutotuneCache(std::string path) : path_(std::move(path)) {
    if (path_.empty()) return;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);)
      if (auto parsed = parseTuneLine(line)) choices_[parsed->first] = parsed->second;
  }

  const std::string& path() const { return path_; }

  /// The choice recorded for `key`, if any.
  std::optional<std::string> find(const TuneKey& key) const {
    const auto it = choices_.find(key.text());
    if (it == choices_.end()) return std::nullopt;
    return it->second;
  }

  /// Keeps `result` for `key` and appends its line to the file, creating the file and its folder.
  /// Returns false when the file cannot be written (the choice then lives for this process only).
  bool record(const TuneKey& key, const TuneResult& result) {
    choices_[key.text()] = result.choice;
    if (path_.empty()) return true;
    std::error_code ignored;
    const std::filesystem::path file(path_);
    if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ignored);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    const std::string line = formatTuneLine(key, result) + '\n';
    const bool whole = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
    ::close(fd);
    return whole;
  }

  /// LINAC_AUTOTUNE_CACHE when set, else $XDG_CACHE_HOME/linac/autotune.tsv, else
  /// $HOME/.cache/linac/autotune.tsv; "" when none of them is set.
  static std::string defaultPath() {
    if (const char* path = std::getenv("LINAC_AUTOTUNE_CACHE")) return path;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
      return std::string(xdg) + "/linac/autotune.tsv";
    if (const char* home = std::getenv("HOME"); home && *home)
      return std::string(home) + "/.cache/linac/autotune.tsv";
    return "";
  }

 private:
  std::string path_;
  std::map<std::string, std::string> choices_;  // key text -> choice
};

}  // namespace linac::kernels
