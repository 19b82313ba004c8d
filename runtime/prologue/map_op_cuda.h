// The CUDA side of applyMap (map_op.cpp): a prologue map run by its generated device launchers
// (generated/<variant>/<variant>_cuda.cu). Compiled only when LINAC_ENABLE_CUDA is on, which
// defines LINAC_HAVE_CUDA.
#pragma once

#include "registry/registry.h"

#include <torch/types.h>

#include <vector>

namespace linac::prologue {

/// `map` over `operands` (float32, all on one CUDA device, broadcastable together) with the
/// launchers `device`, on the current stream of that device. Differentiable: backward runs the
/// partials launcher and reduces each operand's gradient to its shape on the GPU.
torch::Tensor applyDeviceMap(const runtime::PrologueMap& map, const runtime::DeviceMap& device,
                             const std::vector<torch::Tensor>& operands);

/// Launches a variant's fused chunk forward (fused_recurrence.h) on the current stream of `device`.
void launchFusedForward(runtime::FusedForwardFn forward, const kernels::FusedForwardArgs& args,
                        const torch::Device& device);

}  // namespace linac::prologue
