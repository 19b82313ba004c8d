// The step's time by category, read from the Chrome trace that LibTorch's Kineto profiler writes
// (`linac train --profile N` saves it as RUN_DIR/profile/trace.json, then summarises it here).
//
// Why the trace and not the profiler's in-memory event tree: on the H200 the tree lacked every
// kernel launched by the autograd engine's thread (the whole backward: 150 of 478 ms per step of
// a 340m Gated DeltaNet step were in it), while the trace saved from the same profile holds them
// all (bench/NOTES.md, 2026-12-04).
//
// Rules. The categories are the record_function scopes the model and the trainer open around each
// part of the step: a scope named "linac::<category>" (ops/profile_scope.h, a "user_annotation"
// event in the trace) makes <category>. A host op ("cpu_op") belongs to its innermost enclosing
// scope on its thread; a backward op (an autograd node: a "Sequence number" and a nonzero "Fwd
// thread id") to the category of the forward op that created it (the last forward op, "Fwd thread
// id" 0, to start with that sequence number; one forward thread, as in training); a device event
// (kernel, memcpy, memset) to the op that launched it (the same "External id"). What no scope
// covers is "other" (autograd bookkeeping, residual adds, data transfer, host overhead).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace linac::trainer {

struct ProfileCategory {
  std::string name;     // the scope's category ("mixer_kernel"), or "other"
  double deviceMs = 0;  // device kernel, memcpy and memset time per step
  double hostMs = 0;    // host self time of the category's ops per step
};

struct ProfileEntry {
  std::string name;      // a kernel's name (device) or an op's (host)
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

/// Per-step totals of a Kineto Chrome trace (an object with "traceEvents") covering `steps` steps,
/// with the `topCount` kernels (host ops when !device) of most self time. wallMs is left 0: the
/// caller measured it. Throws std::invalid_argument when `trace` has no "traceEvents" array.
StepProfile summarizeTrace(const nlohmann::json& trace, int64_t steps, size_t topCount, bool device);

}  // namespace linac::trainer
