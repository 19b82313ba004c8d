//===- LinacCheckConstants.cpp - -linac-check-constants --------------------===//
//
// Rejects a float constant that is inf or nan in a linac.map body: folding
// (canonicalize, or the chain rule of linac-differentiate) can produce one
// from finite operands, and the emitters could not print it. The spec front
// end reports the usual causes at their node (a constant that folds to inf,
// division by a constant zero); this pass catches the rest, such as a
// derivative whose constant factors overflow float32.
//
//===----------------------------------------------------------------------===//

#include "linac/Dialect/Linac/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

namespace mlir::linac {
#define GEN_PASS_DEF_LINACCHECKCONSTANTSPASS
#include "linac/Dialect/Linac/Transforms/Passes.h.inc"
} // namespace mlir::linac

using namespace mlir;
using namespace mlir::linac;

namespace {

/// "inf", "-inf" or "nan".
static std::string nonFiniteText(const APFloat &value) {
  if (value.isNaN())
    return "nan";
  return value.isNegative() ? "-inf" : "inf";
}

struct LinacCheckConstants
    : mlir::linac::impl::LinacCheckConstantsPassBase<LinacCheckConstants> {
  void runOnOperation() override {
    bool failed = false;
    getOperation().walk([&](MapOp map) {
      for (auto constant : map.getBodyBlock().getOps<arith::ConstantOp>()) {
        auto value = dyn_cast<FloatAttr>(constant.getValue());
        if (!value || value.getValue().isFinite())
          continue;
        // Folded constants have no location of their own: report the map's,
        // which is where the role's expression starts in the spec.
        StringRef role = map.getRole() ? *map.getRole() : "map";
        InFlightDiagnostic diag = map.emitError();
        if (map.isGradient())
          diag << "the derivative of '" << role.drop_front(5) << "'";
        else
          diag << "'" << role << "'";
        diag << " folds to the constant " << nonFiniteText(value.getValue())
             << ", which is not a finite float32 number";
        failed = true;
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (failed)
      signalPassFailure();
  }
};

} // namespace
