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

/// Expands a schedule text (`pure`, `transformer`, `R:1`, `explicit:i,j,..`)
/// over `numLayers` layers into one flag per layer (true = attention).
/// On bad text returns failure and sets `error` (lowercase, values inline).
llvm::FailureOr<llvm::SmallVector<bool>>
expandSchedule(llvm::StringRef schedule, int64_t numLayers, std::string &error);

} // namespace mlir::linac

#endif // LINAC_DIALECT_LINAC_IR_LINACOPS_H
