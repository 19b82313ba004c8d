//===- LinacDialect.cpp - linac dialect registration -----------------------===//

#include "linac/Dialect/Linac/IR/LinacDialect.h"
#include "linac/Dialect/Linac/IR/LinacOps.h"
#include "linac/Dialect/Linac/IR/LinacTypes.h"

using namespace mlir;
using namespace mlir::linac;

#include "linac/Dialect/Linac/IR/LinacDialect.cpp.inc"

void LinacDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "linac/Dialect/Linac/IR/LinacOps.cpp.inc"
      >();
  registerTypesAndAttributes();
}
