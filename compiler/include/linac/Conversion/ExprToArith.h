// Lowering of spec expressions (linac::spec::Expr) to scalar f32 arith/math ops, the body of a
// linac.map region. Built-ins without a direct op are expanded into numerically stable forms:
//   sigmoid(x)    = 1 / (1 + exp(-x))
//   softplus(x)   = max(x, 0) + log1p(exp(-|x|))
//   logsigmoid(x) = -softplus(-x)
//   silu(x)       = x * sigmoid(x)
//   clamp(x,l,h)  = min(max(x, l), h)
//   pow(x, y)     = exp(y * log(x))        (x > 0)
#pragma once

#include "linac/Spec/Spec.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

#include <functional>
#include <string>

namespace linac {

/// Resolves a reference (an input, parameter or index name) to an f32 value in the region
/// being built; returns a null Value for names it does not know.
using RefResolver = std::function<mlir::Value(const std::string& name)>;

/// Emits `expr` at the builder's insertion point and returns its f32 result. Throws
/// spec::SpecError for unknown functions or wrong argument counts (the parser rejects these
/// first; this is the backstop for programmatic callers).
mlir::Value lowerExprToArith(mlir::OpBuilder& builder, mlir::Location loc,
                             const spec::Expr& expr, const RefResolver& resolve);

}  // namespace linac
