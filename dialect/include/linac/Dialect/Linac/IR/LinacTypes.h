//===- LinacTypes.h - linac enums, attributes and types ---------*- C++ -*-===//
#ifndef LINAC_DIALECT_LINAC_IR_LINACTYPES_H
#define LINAC_DIALECT_LINAC_IR_LINACTYPES_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Types.h"

#include "linac/Dialect/Linac/IR/LinacEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "linac/Dialect/Linac/IR/LinacAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "linac/Dialect/Linac/IR/LinacTypes.h.inc"

#endif // LINAC_DIALECT_LINAC_IR_LINACTYPES_H
