// `linac train --profile N`: LibTorch's Kineto profiler (CPU activities; CUDA activities too on a
// CUDA device) over N optimizer steps after a warm-up, a Chrome trace of them, and the step's
// time by category.
//
// The categories are the record_function scopes the model and the trainer open around each part
// of the step: a scope named "linac::<category>" (ops/profile_scope.h) makes <category>. An op
// belongs to its innermost enclosing scope; a backward op to the scope of the forward op that
// created its autograd node (linked by sequence number and forward thread, as the profiler links
// forward and backward in its trace); a device kernel to the op that launched it. What no scope
// covers is "other" (autograd bookkeeping, residual adds, data transfer, host overhead).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace linac::trainer {

/// Optimizer steps run before the profiled ones: the first steps allocate memory, load kernels
/// and tune, which a steady-state profile should not count.
constexpr int64_t kProfileWarmupSteps = 2;

struct ProfileCategory {
  std::string name;     // the scope's category ("mixer_kernel"), or "other"
  double deviceMs = 0;  // device kernel, memcpy and memset time per step (CUDA)
  double hostMs = 0;    // host self time of the category's ops per step
};

struct ProfileEntry {
  std::string name;      // a kernel's name (CUDA) or an op's (CPU)
  std::string category;
  double ms = 0;         // self time per step: on the device for kernels, on the host for ops
  int64_t calls = 0;     // per step, rounded
};

struct StepProfile {
  int64_t steps = 0;
  double wallMs = 0;     // wall time per step
  bool device = false;   // device times were recorded (CUDA)
  std::vector<ProfileCategory> categories;  // by time, largest first; "other" last
  std::vector<ProfileEntry> top;            // the kernels (ops on CPU) taking the most self time
  /// The table printed by `linac train --profile`.
  std::string table() const;
};

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
