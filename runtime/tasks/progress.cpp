#include "tasks/progress.h"

#include <cmath>
#include <cstdio>

namespace linac::tasks {

Progress::Progress(std::string unit, int64_t total, std::ostream* out, double everySeconds)
    : unit_(std::move(unit)), total_(total), out_(out), everySeconds_(everySeconds), start_(Clock::now()),
      lastPrint_(start_) {}

void Progress::advance(int64_t done, const std::string& label) {
  done_ += done;
  if (!out_) return;
  const Clock::time_point now = Clock::now();
  const bool finished = done_ >= total_;
  if (!finished && std::chrono::duration<double>(now - lastPrint_).count() < everySeconds_) return;
  lastPrint_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  constexpr double kPercent = 100.0;
  char pct[16];
  std::snprintf(pct, sizeof pct, "%.1f", total_ ? kPercent * double(done_) / double(total_) : kPercent);
  *out_ << label << ": " << done_ << "/" << total_ << " " << unit_ << " (" << pct << "%), " << formatDuration(elapsed);
  if (!finished && done_ > 0) *out_ << ", ETA " << formatDuration(elapsed / double(done_) * double(total_ - done_));
  *out_ << std::endl;
}

std::string formatDuration(double seconds) {
  constexpr double kMinute = 60, kHour = 3600;
  char buf[32];
  if (seconds < kMinute) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (seconds < kHour) {
    const int64_t s = int64_t(std::lround(seconds));
    std::snprintf(buf, sizeof buf, "%lldm %02llds", (long long)(s / 60), (long long)(s % 60));
  } else {
    const int64_t m = int64_t(std::lround(seconds / kMinute));
    std::snprintf(buf, sizeof buf, "%lldh %02lldm", (long long)(m / 60), (long long)(m % 60));
  }
  return buf;
}

}  // namespace linac::tasks
