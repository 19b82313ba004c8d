// The profiler scopes around each part of the model (`linac train --profile`): a record_function
// named "linac::<category>" around the code of one part, so the step's profile
// (trainer/step_profile.h) totals the time of each part by category. A scope costs a check of
// whether a profiler is active when none is.
#pragma once

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>

#include <utility>

namespace linac::ops::scope {

// The categories ("linac::" + name).
inline constexpr const char* kMixerKernel = "linac::mixer_kernel";         // the recurrence / scan kernels
inline constexpr const char* kPrologueEpilogue = "linac::prologue_epilogue";  // the spec's maps around them
inline constexpr const char* kShortConv = "linac::short_conv";             // causal depthwise convolutions, their activations
inline constexpr const char* kProjections = "linac::projections";         // mixers' input / output GEMMs
inline constexpr const char* kAttention = "linac::attention";             // RoPE, SDPA
inline constexpr const char* kMlp = "linac::mlp";                         // SwiGLU: GEMMs and activation
inline constexpr const char* kNorm = "linac::norm";                       // the blocks' and the final RMSNorm
inline constexpr const char* kEmbedding = "linac::embedding";
inline constexpr const char* kLmHeadLoss = "linac::lm_head_loss";         // the LM head and the loss
inline constexpr const char* kOptimizer = "linac::optimizer";             // zero_grad, clipping, AdamW
inline constexpr const char* kCheckpoint = "linac::checkpoint";  // a checkpointed block's bookkeeping, residual adds

/// f() inside the scope `name`. The scope carries the autograd sequence number current at its
/// start, so a backward node created first in it (a custom autograd function, whose forward
/// records no op of its own) is linked to this scope rather than to the op before it: the
/// profile attributes backward time through these links.
template <typename F>
decltype(auto) profiled(const char* name, F&& f) {
  RECORD_FUNCTION_WITH_SCOPE(at::RecordScope::USER_SCOPE, name, c10::ArrayRef<const c10::IValue>{},
                             static_cast<int64_t>(at::sequence_number::peek()));
  return std::forward<F>(f)();
}

}  // namespace linac::ops::scope
