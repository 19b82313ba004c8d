//===- LinacOps.h - linac operations ----------------------------*- C++ -*-===//
#ifndef LINAC_DIALECT_LINAC_IR_LINACOPS_H
#define LINAC_DIALECT_LINAC_IR_LINACOPS_H

#include "linac/Dialect/Linac/IR/LinacDialect.h"
#include "linac/Dialect/Linac/IR/LinacTypes.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <string>

#define GET_OP_CLASSES
#include "linac/Dialect/Linac/IR/LinacOps.h.inc"

namespace mlir::linac {

/// Expands a schedule text (`pure`, `transformer`, `R:1`, `i,j,...`) over
/// `numLayers` layers into one flag per layer (true = attention), with the spec
/// front end's parser and expansion (linac/Spec/SpecParser.h), so that a
/// schedule means, and is rejected with, the same everywhere. On bad text or an
/// index out of range returns failure and sets `error` to the front end's
/// message.
llvm::FailureOr<llvm::SmallVector<bool>>
expandSchedule(llvm::StringRef schedule, int64_t numLayers, std::string &error);

} // namespace mlir::linac

#endif // LINAC_DIALECT_LINAC_IR_LINACOPS_H
