// A progress line for long evaluations: "ruler 1024: 48/704 examples (6.8%), 12.3 s, ETA 2m 48s".
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace linac::tasks {

class Progress {
 public:
  /// Prints to `out` (nothing when null) at most once every `everySeconds`, and when done.
  Progress(std::string unit, int64_t total, std::ostream* out, double everySeconds);
  /// `done` more finished, under the label of the current piece of work.
  void advance(int64_t done, const std::string& label);
  int64_t done() const { return done_; }

 private:
  using Clock = std::chrono::steady_clock;
  std::string unit_;
  int64_t total_, done_ = 0;
  std::ostream* out_;
  double everySeconds_;
  Clock::time_point start_, lastPrint_;
};

/// "2m 48s", "1h 05m", "12.3 s".
std::string formatDuration(double seconds);

}  // namespace linac::tasks
