// Internal to runtime/ops: validation of the recurrence ops' arguments before autograd sees
// them (every failure names the op and the argument: checks.h).
#pragma once

#include "recurrence_ops.h"

#include <torch/types.h>

#include <cstdint>
#include <string_view>

namespace linac::ops::detail {

inline constexpr std::string_view kRecurrenceOp = "linac::ops::recurrence";
inline constexpr std::string_view kStepOp = "linac::ops::recurrenceStep";
inline constexpr std::string_view kScanOp = "linac::ops::scan";

struct RecurrenceDims {
  int64_t batch, seq_len, heads, key_dim, value_dim, num_seqs;
  torch::Tensor cu_seqlens_host;  // [N + 1] int64 on the CPU, or undefined
};

/// q, k, v, g, beta, u and the devices / dtypes of a chunkwise call or a decode step. `tokens`
/// holds the leading dimensions of q: {B, T} for the chunkwise op, {B} for the step.
void checkQkvAndGates(std::string_view op, const RecurrenceInputs& in, const kernels::RecurrenceKind& kind,
                      c10::IntArrayRef tokens);

/// `kind` with its enum values range-checked.
kernels::RecurrenceKind checkedKind(std::string_view op, const kernels::RecurrenceKind& kind);

void checkScale(std::string_view op, double scale);

/// Everything about a chunkwise call: shapes, dtypes, devices, cu_seqlens (copied to the host),
/// h0; returns the dimensions.
RecurrenceDims checkRecurrence(const RecurrenceInputs& in, const RecurrenceOptions& options);

}  // namespace linac::ops::detail
