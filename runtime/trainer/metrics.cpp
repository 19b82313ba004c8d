#include "trainer/metrics.h"

#include "trainer/device_memory.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace linac::trainer::detail {
namespace {

// JSON has no NaN or infinity: they are written as null.
nlohmann::ordered_json number(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }

// Whether a metrics line is kept on resume: a whole JSON object of a step <= keepUpToStep.
bool keepLine(const std::string& line, int64_t keepUpToStep) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    return false;  // cut short by a kill or a full disk
  auto step = j.find("step");
  return step == j.end() || !step->is_number_integer() || step->get<int64_t>() <= keepUpToStep;
}

// One line; bytes that are not UTF-8 (in a path inside an error message) become U+FFFD.
std::string jsonLine(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t keepUpToStep) {
  std::string kept;
  if (keepUpToStep >= 0) {
    std::istringstream in(readFileIfExists(path).value_or(""));
    for (std::string line; std::getline(in, line);)
      if (keepLine(line, keepUpToStep))
        kept += line + "\n";
  }
  writeFileAtomically(path, kept);
  out_.emplace(path);
}

void MetricsWriter::write(const StepStats& s) {
  nlohmann::ordered_json j;
  j["step"] = s.step;
  j["loss"] = number(s.loss);
  j["lr"] = number(s.lr);
  j["grad_norm"] = number(s.gradNorm);
  j["tokens_per_s"] = number(s.tokensPerS);
  j["elapsed"] = number(s.elapsedS);
  if (s.peakAllocatedBytes)
    j["peak_allocated_bytes"] = *s.peakAllocatedBytes;
  out_->append(jsonLine(j));
}

void MetricsWriter::write(const EvalStats& s, double elapsedS) {
  nlohmann::ordered_json j;
  j["step"] = s.step;
  j["eval_loss"] = number(s.loss);
  j["eval_ppl"] = number(s.ppl);
  if (!std::isnan(s.accuracy)) {
    j["eval_accuracy"] = number(s.accuracy);
    j["eval_targets"] = s.targets;
  }
  j["elapsed"] = number(elapsedS);
  out_->append(jsonLine(j));
}

void MetricsWriter::writeError(int64_t step, const std::string& message) {
  nlohmann::ordered_json j;
  j["step"] = step;
  j["error"] = message;
  out_->append(jsonLine(j));
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
  std::string line = buf;
  if (s.peakAllocatedBytes) {
    std::snprintf(buf, sizeof buf, " | peak %.2f GiB", static_cast<double>(*s.peakAllocatedBytes) / kBytesPerGiB);
    line += buf;
  }
  return line;
}

}  // namespace linac::trainer::detail
