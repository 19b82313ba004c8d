// Run reporting: outDir/metrics.jsonl (one JSON object per line) and the human progress line.
// Internal to runtime/trainer.
#pragma once

#include "trainer/file_io.h"
#include "trainer/trainer.h"

#include <optional>
#include <string>

namespace linac::trainer::detail {

/// Appends metrics lines. Train lines: {"step","loss","lr","grad_norm","tokens_per_s",
/// "elapsed"}, plus "peak_allocated_bytes" on a CUDA device; eval lines: {"step","eval_loss","eval_ppl","elapsed"}, plus "eval_accuracy" and
/// "eval_targets" for explicit-target evaluations (MQAR); the line of a run stopped by a
/// non-finite loss: {"step","error"}. Non-finite numbers are written as null (JSON has no NaN).
class MetricsWriter {
public:
  /// keepUpToStep < 0 (a fresh start): `path` starts empty. keepUpToStep >= 0 (a resume): the
  /// lines of later steps, which the interrupted run logged past its checkpoint, are dropped
  /// (the resumed run logs those steps again, and the file should hold each step once), and so
  /// is a line a kill cut short. Either way the new file replaces the old one by rename, so a
  /// kill or a full disk meanwhile leaves the old one whole. Lines are then appended.
  MetricsWriter(const std::string& path, int64_t keepUpToStep);
  void write(const StepStats& stats);
  void write(const EvalStats& stats, double elapsedS);
  void writeError(int64_t step, const std::string& message);

private:
  std::optional<AppendFile> out_;
};

/// "step 120/1000 | loss 2.341 | lr 2.9e-04 | 5.1k tok/s | ETA 3m12s", plus " | peak 3.21 GiB"
/// where the peak allocated memory is known
std::string progressLine(const StepStats& stats, int64_t totalSteps, double etaS);
/// "3m12s", "1h05m", "42s"
std::string formatDuration(double seconds);

}  // namespace linac::trainer::detail
