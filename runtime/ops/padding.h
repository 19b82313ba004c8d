// Zero-padding of the head dims to sizes a kernel backend supports. The CUDA chunk kernels take
// dk in {64, 128, 256} and dv a multiple of 64 (kernels/cuda/cuda_kernels.h); a tiny model's
// dk = 32 would otherwise be rejected. Padding is exact for every recurrence kind:
//   - padded key channels carry q = k = 0 (and u = 0, g = 0): they add nothing to S^T q, k k^T or
//     k v^T, so their state rows start at zero (h0 padded with zeros) and stay zero, also under the
//     delta rule's (I - beta k k^T) and any decay;
//   - padded value columns carry v = 0: their state columns and outputs stay zero.
// The padded outputs and final state are sliced back; padding and slicing are differentiable, so
// the gradients are those of the unpadded recurrence.
#pragma once

#include "recurrence_ops.h"

#include <cstdint>
#include <utility>

namespace linac::ops {

/// The (dk, dv) the CUDA chunk kernels run for a recurrence of head dims (key_dim, value_dim):
/// dk rounded up to 64, 128 or 256 (unchanged above 256: the kernels reject it with a message),
/// dv rounded up to a multiple of 64.
std::pair<int64_t, int64_t> cudaChunkDims(int64_t key_dim, int64_t value_dim);

/// recurrence() run at head dims (key_dim, value_dim) >= the inputs' by zero-padding, with the
/// outputs sliced back to the inputs' dims. Used for CUDA tensors whose dims the kernels do not
/// take; device-agnostic (the CPU tests check it against the unpadded op).
std::pair<torch::Tensor, torch::Tensor> recurrencePadded(const RecurrenceInputs& in,
                                                         const RecurrenceOptions& options,
                                                         int64_t key_dim, int64_t value_dim);

}  // namespace linac::ops
