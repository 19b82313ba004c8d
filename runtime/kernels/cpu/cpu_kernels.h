// CPU backend of the recurrence contract (runtime/kernels/common/recurrence.h): the same
// chunkwise algorithm as the CUDA skeletons, in portable C++20 with fp32 accumulation and state.
// Work is spread over (sequence, head) pairs on one thread pool (thread_pool.h). Malformed calls throw
// std::invalid_argument. Inputs q, k, v, d_o, x, d_h are read in `dtype`; outputs and gradients
// of those tensors are written in `dtype` (bf16 / fp16 rounded to nearest even); g, beta, u and
// states are fp32.
#pragma once

#include <cstdint>

#include "../common/recurrence.h"

namespace linac::kernels::cpu {

/// Chunk length used when the caller has no tuned value (DESIGN.md section 4).
inline constexpr int kDefaultChunk = 64;

/// o (and ht when requested) for every sequence and head.
void chunkForward(const RecurrenceKind& kind, const RecurrenceShape& shape,
                  const RecurrenceForwardArgs& args, DType dtype, int chunk = kDefaultChunk);

/// Gradients of <o, d_o> + <ht, d_ht> with respect to q, k, v, g, beta, u, h0. Every gradient
/// pointer may be null (that gradient is then not written). d_g for the fixed class is [H],
/// summed over tokens and sequences; d_u is [H, dk], summed over tokens and sequences.
void chunkBackward(const RecurrenceKind& kind, const RecurrenceShape& shape,
                   const RecurrenceBackwardArgs& args, DType dtype, int chunk = kDefaultChunk);

/// One decode step (T = 1) for `batch` sequences; args.state [B, H, dk, dv] is updated in place.
void recurrentStep(const RecurrenceKind& kind, int64_t batch, int64_t heads, int64_t dk, int64_t dv,
                   const RecurrenceStepArgs& args, DType dtype);

/// HGRN vector scan h_t = exp(g_t) * h_{t-1} + x_t and its backward.
void scanForward(const ScanShape& shape, const ScanForwardArgs& args, DType dtype);
void scanBackward(const ScanShape& shape, const ScanBackwardArgs& args, DType dtype);

}  // namespace linac::kernels::cpu
