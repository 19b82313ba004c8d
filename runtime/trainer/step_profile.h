// `linac train --profile N`: LibTorch's Kineto profiler (CPU activities; CUDA activities too on a
// CUDA device) over N optimizer steps after a warm-up, a Chrome trace of them, and the step's
// time by category, read back from that trace (trainer/trace_summary.h has the rules).
#pragma once

#include "trainer/trace_summary.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace linac::trainer {

/// Optimizer steps run before the profiled ones: the first steps allocate memory, load kernels
/// and tune, which a steady-state profile should not count.
constexpr int64_t kProfileWarmupSteps = 2;

/// Profiles from construction to finish(). One at a time per process (the profiler is global).
class StepProfiler {
public:
  /// Starts the profiler for `device` (CUDA activities when it is a CUDA device).
  explicit StepProfiler(const torch::Device& device);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  /// Waits for the device, stops the profiler, writes the Chrome trace to `tracePath` and returns
  /// the per-step totals over `steps` steps, with the `topCount` kernels (ops) of most self time.
  StepProfile finish(const std::string& tracePath, int64_t steps, size_t topCount);

private:
  torch::Device device_;
  bool running_ = false;
  int64_t startNs_ = 0;
};

}  // namespace linac::trainer
