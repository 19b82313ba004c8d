// The oracle's side of the prologue: spec expressions evaluated directly on float64 torch tensors
// (broadcasting, autograd-capable), from the spec's syntax tree. It shares nothing with the
// compiler's lowering, differentiation or emitted code, so `linac verify` checks all three.
#pragma once

#include "linac/Spec/Spec.h"

#include <torch/types.h>

#include <map>
#include <string>

namespace linac::oracle {

/// Values of the names an expression may reference (inputs, params, head, layer, ...).
using Env = std::map<std::string, torch::Tensor>;

/// Evaluates `expr`; references to definitions in `defs` are expanded recursively. Throws
/// std::invalid_argument for unknown names or functions.
torch::Tensor evalExpr(const spec::Expr& expr, const Env& env,
                       const std::vector<spec::DefSpec>& defs);

}  // namespace linac::oracle
