#include "tasks/report.h"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace linac::tasks {
namespace {

constexpr int kNameWidth = 18, kCellWidth = 9, kScoreDecimals = 1, kAccDecimals = 4;

std::vector<int64_t> contextsOf(const std::vector<RulerScore>& scores) {
  std::vector<int64_t> contexts;
  for (const RulerScore& s : scores)
    if (std::find(contexts.begin(), contexts.end(), s.context) == contexts.end()) contexts.push_back(s.context);
  return contexts;
}

std::string fixed(double v, int decimals) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(decimals) << v;
  return o.str();
}

/// Fixed point, or 4 significant digits in scientific form where fixed would not fit a cell
/// (an untrained model's LAMBADA perplexity is astronomically large).
std::string number(double v) {
  constexpr double kLargest = 1e6;
  constexpr int kDigits = 4;
  if (std::abs(v) < kLargest) return fixed(v, kAccDecimals);
  std::ostringstream o;
  o << std::scientific << std::setprecision(kDigits - 1) << v;
  return o.str();
}

}  // namespace

void printRulerTable(std::ostream& out, const std::vector<RulerScore>& scores) {
  const std::vector<int64_t> contexts = contextsOf(scores);
  std::vector<std::string> tasks;
  for (const RulerScore& s : scores)
    if (std::find(tasks.begin(), tasks.end(), s.task) == tasks.end()) tasks.push_back(s.task);
  out << std::left << std::setw(kNameWidth) << "ruler (%)" << std::right;
  for (int64_t c : contexts) out << std::setw(kCellWidth) << c;
  out << "\n";
  for (const std::string& t : tasks) {
    out << std::left << std::setw(kNameWidth) << t << std::right;
    for (int64_t c : contexts) {
      auto it = std::find_if(scores.begin(), scores.end(), [&](const RulerScore& s) { return s.task == t && s.context == c; });
      out << std::setw(kCellWidth) << (it != scores.end() && it->fits() ? fixed(it->score, kScoreDecimals) : "-");
    }
    out << "\n";
  }
  out << std::left << std::setw(kNameWidth) << "average" << std::right;
  std::string notes;
  for (int64_t c : contexts) {
    const auto [mean, n] = rulerAverage(scores, c);
    out << std::setw(kCellWidth) << (n ? fixed(mean, kScoreDecimals) : "-");
    if (n < int64_t(tasks.size()))
      notes += "  at " + std::to_string(c) + ": over the " + std::to_string(n) + " of " + std::to_string(tasks.size()) +
               " tasks that fit\n";
  }
  out << "\n" << notes;
}

void printZeroShotTable(std::ostream& out, const std::vector<ZeroShotResult>& results) {
  constexpr int kWide = kCellWidth + 2;
  out << std::left << std::setw(kNameWidth) << "zero-shot" << std::right << std::setw(kCellWidth) << "docs"
      << std::setw(kCellWidth) << "acc" << std::setw(kCellWidth) << "acc_norm" << std::setw(kWide) << "perplexity"
      << "\n";
  for (const ZeroShotResult& r : results) {
    out << std::left << std::setw(kNameWidth) << r.task << std::right << std::setw(kCellWidth) << r.examples
        << std::setw(kCellWidth) << number(r.acc) << std::setw(kCellWidth) << (r.accNorm ? number(*r.accNorm) : "-")
        << std::setw(kWide) << (r.perplexity ? number(*r.perplexity) : "-") << "\n";
  }
}

std::vector<nlohmann::ordered_json> rulerJson(const std::vector<RulerScore>& scores) {
  std::vector<nlohmann::ordered_json> lines;
  for (const RulerScore& s : scores) {
    nlohmann::ordered_json j;
    j["task"] = "ruler/" + s.task;
    j["context"] = s.context;
    if (s.fits()) {
      j["examples"] = s.examples;
      j["score"] = s.score;
      j["metric"] = rulerTask(s.task).metric == RulerMetric::MatchAll ? "string_match_all" : "string_match_part";
      j["seconds"] = s.seconds;
    } else {
      j["fits"] = false;
      j["needed_tokens"] = s.neededTokens;
    }
    lines.push_back(j);
  }
  for (int64_t c : contextsOf(scores)) {
    const auto [mean, n] = rulerAverage(scores, c);
    nlohmann::ordered_json j;
    j["task"] = "ruler/average";
    j["context"] = c;
    j["score"] = mean;
    j["tasks"] = n;
    lines.push_back(j);
  }
  return lines;
}

nlohmann::ordered_json zeroShotJson(const ZeroShotResult& r) {
  nlohmann::ordered_json j;
  j["task"] = r.task;
  j["examples"] = r.examples;
  j["acc"] = r.acc;
  if (r.accNorm) j["acc_norm"] = *r.accNorm;
  if (r.perplexity) j["perplexity"] = *r.perplexity;
  j["seconds"] = r.seconds;
  return j;
}

void appendJsonLines(const std::string& path, const std::vector<nlohmann::ordered_json>& lines) {
  std::string bytes;
  for (const auto& j : lines) bytes += j.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error("cannot write " + path + ": " + std::strerror(err));
    }
    written += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) throw std::runtime_error("cannot sync " + path + ": " + std::strerror(errno));
}

}  // namespace linac::tasks
