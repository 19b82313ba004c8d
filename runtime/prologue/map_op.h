// A compiled prologue expression (runtime/registry PrologueMap) as a differentiable torch op:
// forward runs the generated function elementwise, backward its generated partial derivatives
// (from linac-differentiate), reduced back to each operand's broadcast shape.
#pragma once

#include "registry/registry.h"

#include <torch/types.h>

#include <vector>

namespace linac::prologue {

/// `operands` (one per map.args, in order) broadcast together; float32 CPU tensors (other float
/// dtypes are converted). Returns the role's value, shape = the broadcast shape.
torch::Tensor applyMap(const runtime::PrologueMap& map, const std::vector<torch::Tensor>& operands);

}  // namespace linac::prologue
