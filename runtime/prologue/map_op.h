// A compiled prologue expression (runtime/registry PrologueMap) as a differentiable torch op:
// forward runs the generated function elementwise, backward its generated partial derivatives
// (from linac-differentiate), reduced back to each operand's broadcast shape. CPU operands run
// the generated host loops; CUDA operands the generated device maps (<variant>_cuda.cu, with
// LINAC_ENABLE_CUDA) on the current stream, or a round trip through the CPU for variants that
// have none.
#pragma once

#include "registry/registry.h"

#include <torch/types.h>

#include <vector>

namespace linac::prologue {

/// `operands` (one per map.args, in order) broadcast together; CPU tensors, or tensors on one
/// CUDA device (CPU operands then join them there). Computed in float32 (other float dtypes are
/// converted). Returns the role's float32 value on the operands' device, shape = the broadcast
/// shape.
torch::Tensor applyMap(const runtime::PrologueMap& map, const std::vector<torch::Tensor>& operands);

}  // namespace linac::prologue
