// How a device map (runtime/registry DeviceMap) reads its operands: the result's index space of
// at most kDeviceMapRank dims and each operand's strides in it, computed from torch tensors
// without copying them. Plain torch, no CUDA: the CPU tests check it against broadcasting.
#pragma once

#include "registry/registry.h"

#include <torch/types.h>

#include <vector>

namespace linac::prologue {

/// The index space of a contiguous float32 result and how each operand is read in it.
struct StridedLayout {
  runtime::MapShape shape;
  std::vector<runtime::StridedOperand> operands;  // one per tensor, in order
};

/// The broadcast shape of `tensors` (throws when they do not broadcast together).
std::vector<int64_t> broadcastSizes(at::TensorList tensors);

/// The layout of a contiguous result of `sizes` over `tensors` (float32, each broadcastable to
/// `sizes`): dims of size 1 are dropped and adjacent dims merged wherever every tensor steps
/// through them as through one dim, which keeps the result's row-major element order; the rest is
/// padded in front to kDeviceMapRank dims. Broadcast dims read with stride 0. When more than
/// kDeviceMapRank dims remain, the operands are read from contiguous copies expanded to `sizes`,
/// which `keepAlive` holds: keep it until the kernels that read them are enqueued.
StridedLayout stridedLayout(at::IntArrayRef sizes, const std::vector<torch::Tensor>& tensors,
                            std::vector<torch::Tensor>& keepAlive);

}  // namespace linac::prologue
