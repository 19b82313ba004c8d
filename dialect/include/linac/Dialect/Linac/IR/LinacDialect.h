//===- LinacDialect.h - linac dialect ---------------------------*- C++ -*-===//
#ifndef LINAC_DIALECT_LINAC_IR_LINACDIALECT_H
#define LINAC_DIALECT_LINAC_IR_LINACDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Dialect.h"

#include "linac/Dialect/Linac/IR/LinacDialect.h.inc"

#endif // LINAC_DIALECT_LINAC_IR_LINACDIALECT_H
