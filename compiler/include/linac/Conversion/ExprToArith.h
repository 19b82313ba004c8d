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
#include <optional>
#include <string>

namespace linac {

/// Resolves a reference (an input, parameter or index name) to an f32 value in the region
/// being built; returns a null Value for names it does not know.
using RefResolver = std::function<mlir::Value(const std::string& name)>;

/// A definition's expression, substituted wherever the definition is referenced, and the
/// location its ops get.
struct Definition {
  const spec::Expr* expr;
  mlir::Location loc;
};
/// The definition of a name, or nullopt for names that are not definitions.
using DefinitionLookup = std::function<std::optional<Definition>(const std::string& name)>;

/// Emits `expr` at the builder's insertion point and returns its f32 result; ops get `loc`, or
/// their definition's location. Names resolve through `resolve` first, then `definitions`.
/// Without recursion, so an expression of any size lowers. Throws spec::SpecError for unknown
/// names and functions, wrong argument counts and cyclic definitions (the parser rejects these
/// first; this is the backstop for programmatic callers).
mlir::Value lowerExprToArith(mlir::OpBuilder& builder, mlir::Location loc,
                             const spec::Expr& expr, const RefResolver& resolve,
                             const DefinitionLookup& definitions);

}  // namespace linac
