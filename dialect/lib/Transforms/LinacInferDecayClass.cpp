//===- LinacInferDecayClass.cpp - -linac-infer-decay-class -----------------===//

#include "linac/Dialect/Linac/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"

namespace mlir::linac {
#define GEN_PASS_DEF_LINACINFERDECAYCLASSPASS
#include "linac/Dialect/Linac/Transforms/Passes.h.inc"
} // namespace mlir::linac

using namespace mlir;
using namespace mlir::linac;

namespace {

/// True if `decay` is produced by a linac.map whose body yields constant 0.
static bool isProvablyZero(Value decay) {
  auto map = decay.getDefiningOp<MapOp>();
  if (!map)
    return false;
  Value yielded =
      map.getYieldedValues()[cast<OpResult>(decay).getResultNumber()];
  return matchPattern(yielded, m_AnyZeroFloat());
}

struct LinacInferDecayClass
    : mlir::linac::impl::LinacInferDecayClassPassBase<LinacInferDecayClass> {
  void runOnOperation() override {
    getOperation().walk([](RecurrenceOp op) {
      DecayClass cls = op.getTypeDecayClass();
      if (op.getDecay() && isProvablyZero(op.getDecay()))
        cls = DecayClass::none;
      op.setDecayClassAttr(DecayClassAttr::get(op.getContext(), cls));
    });
  }
};

} // namespace
