//===- LinacTypes.cpp - linac enums, attributes and types ------------------===//

#include "linac/Dialect/Linac/IR/LinacTypes.h"
#include "linac/Dialect/Linac/IR/LinacDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::linac;

#include "linac/Dialect/Linac/IR/LinacEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "linac/Dialect/Linac/IR/LinacAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "linac/Dialect/Linac/IR/LinacTypes.cpp.inc"

int FieldType::extentRank(Extent e) {
  switch (e) {
  case Extent::scalar:
    return 0;
  case Extent::head:
    return 1;
  default:
    return 2;
  }
}

FieldType FieldType::broadcast(FieldType a, FieldType b) {
  Extent ea = a.getExtent(), eb = b.getExtent();
  int ra = extentRank(ea), rb = extentRank(eb);
  if (ra == 2 && rb == 2 && ea != eb)
    return {};
  Extent e = ra >= rb ? ea : eb;
  Varying v = (a.isToken() || b.isToken()) ? Varying::token : Varying::constant;
  return FieldType::get(a.getContext(), v, e);
}

void LinacDialect::registerTypesAndAttributes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "linac/Dialect/Linac/IR/LinacTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "linac/Dialect/Linac/IR/LinacAttrs.cpp.inc"
      >();
}
