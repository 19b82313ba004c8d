#include "trainer/metrics.h"

#include <cmath>
#include <cstdio>
#include <regex>
#include <sstream>
#include <vector>

namespace linac::trainer::detail {
namespace {

std::string number(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A JSON string literal: quotes, backslashes and control characters escaped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t keepUpToStep) : path_(path) {
  if (keepUpToStep >= 0) {
    std::vector<std::string> kept;
    {
      std::ifstream in(path);
      static const std::regex stepKey(R"re("step":\s*(-?\d+))re");
      std::string line;
      while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_search(line, m, stepKey) && std::stoll(m[1].str()) > keepUpToStep)
          continue;
        kept.push_back(line);
      }
    }
    std::ofstream rewrite(path, std::ios::trunc);
    for (const auto& line : kept)
      rewrite << line << "\n";
  }
  out_.open(path, std::ios::app);
  if (!out_)
    throw TrainError("cannot open " + path + " for writing");
}

void MetricsWriter::emit(const std::string& line) {
  // Flushed per line so `tail -f` and a crash both see every completed step.
  out_ << line << "\n" << std::flush;
  if (!out_)
    throw TrainError("cannot write to " + path_);
}

void MetricsWriter::write(const StepStats& s) {
  std::ostringstream line;
  line << "{\"step\":" << s.step << ",\"loss\":" << number(s.loss) << ",\"lr\":" << number(s.lr)
       << ",\"grad_norm\":" << number(s.gradNorm) << ",\"tokens_per_s\":" << number(s.tokensPerS)
       << ",\"elapsed\":" << number(s.elapsedS) << "}";
  emit(line.str());
}

void MetricsWriter::write(const EvalStats& s, double elapsedS) {
  std::ostringstream line;
  line << "{\"step\":" << s.step << ",\"eval_loss\":" << number(s.loss)
       << ",\"eval_ppl\":" << number(s.ppl);
  if (!std::isnan(s.accuracy))
    line << ",\"eval_accuracy\":" << number(s.accuracy) << ",\"eval_targets\":" << s.targets;
  line << ",\"elapsed\":" << number(elapsedS) << "}";
  emit(line.str());
}

void MetricsWriter::writeError(int64_t step, const std::string& message) {
  emit("{\"step\":" + std::to_string(step) + ",\"error\":" + quoted(message) + "}");
}

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  auto total = static_cast<int64_t>(std::llround(seconds));
  int64_t h = total / 3600, m = (total % 3600) / 60, s = total % 60;
  char buf[48];
  if (h > 0)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(h), static_cast<long long>(m));
  else if (m > 0)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(m), static_cast<long long>(s));
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  return buf;
}

std::string progressLine(const StepStats& s, int64_t totalSteps, double etaS) {
  char rate[32];
  if (s.tokensPerS >= 1e6)
    std::snprintf(rate, sizeof rate, "%.2fM", s.tokensPerS / 1e6);
  else if (s.tokensPerS >= 1e3)
    std::snprintf(rate, sizeof rate, "%.1fk", s.tokensPerS / 1e3);
  else
    std::snprintf(rate, sizeof rate, "%.0f", s.tokensPerS);
  char buf[160];
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.3f | lr %.1e | %s tok/s | ETA %s",
                static_cast<long long>(s.step), static_cast<long long>(totalSteps), s.loss, s.lr, rate,
                formatDuration(etaS).c_str());
  return buf;
}

}  // namespace linac::trainer::detail
