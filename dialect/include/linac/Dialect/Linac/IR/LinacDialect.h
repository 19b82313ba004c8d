//===- LinacDialect.h - linac dialect ---------------------------*- C++ -*-===//
#ifndef LINAC_DIALECT_LINAC_IR_LINACDIALECT_H
#define LINAC_DIALECT_LINAC_IR_LINACDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Dialect.h"

#include "linac/Dialect/Linac/IR/LinacDialect.h.inc"

namespace mlir::linac {

/// Attributes of a module built from a spec: the spec's path and SHA-256, which the emitters print
/// in the generated files' banners.
inline constexpr llvm::StringLiteral kSpecFileAttrName = "linac.spec_file";
inline constexpr llvm::StringLiteral kSpecHashAttrName = "linac.spec_sha256";

} // namespace mlir::linac

#endif // LINAC_DIALECT_LINAC_IR_LINACDIALECT_H
