//===- LinacVerify.cpp - -linac-verify -------------------------------------===//
//
// Stage-boundary checks beyond the op verifiers (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "linac/Dialect/Linac/Transforms/Passes.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::linac {
#define GEN_PASS_DEF_LINACVERIFYPASS
#include "linac/Dialect/Linac/Transforms/Passes.h.inc"
} // namespace mlir::linac

using namespace mlir;
using namespace mlir::linac;

namespace {

/// True if `value` is `target` or computed from it through linac.map ops.
static bool dependsOn(Value value, Value target) {
  SmallVector<Value> worklist{value};
  llvm::SmallPtrSet<Operation *, 8> seen;
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    if (v == target)
      return true;
    auto map = v.getDefiningOp<MapOp>();
    if (map && seen.insert(map).second)
      llvm::append_range(worklist, map.getInputs());
  }
  return false;
}

static LogicalResult verifyVariant(VariantOp variant) {
  SmallVector<RecurrenceOp> recurrences;
  SmallVector<OutputOp> outputs;
  for (Operation &op : variant.getBodyBlock()) {
    if (auto r = dyn_cast<RecurrenceOp>(op))
      recurrences.push_back(r);
    if (auto o = dyn_cast<OutputOp>(op))
      outputs.push_back(o);
    if (isa<InputOp, ParamOp>(op) && op.use_empty()) {
      StringRef kind = isa<InputOp>(op) ? "input" : "param";
      StringRef name = isa<InputOp>(op) ? cast<InputOp>(op).getName()
                                        : cast<ParamOp>(op).getName();
      op.emitWarning() << kind << " \"" << name << "\" of variant @"
                       << variant.getSymName() << " is unused";
    }
  }
  if (recurrences.size() != 1)
    return variant.emitError()
           << "variant @" << variant.getSymName() << " has "
           << recurrences.size() << " 'linac.recurrence' ops, expected 1";
  if (outputs.size() != 1)
    return variant.emitError()
           << "variant @" << variant.getSymName() << " has " << outputs.size()
           << " 'linac.output' ops, expected 1";
  OutputOp output = outputs.front();
  if (&variant.getBodyBlock().back() != output.getOperation())
    return output.emitError() << "'linac.output' must be the last op of variant @"
                              << variant.getSymName();
  if (!dependsOn(output.getInput(), recurrences.front().getResult()))
    return output.emitError()
           << "the output of variant @" << variant.getSymName()
           << " does not consume the recurrence result";
  return success();
}

template <typename OpT>
static LogicalResult resolve(ModelOp model, FlatSymbolRefAttr ref,
                             StringRef role, StringRef expected) {
  if (!ref)
    return success();
  Operation *target = SymbolTable::lookupNearestSymbolFrom(model, ref);
  if (!target)
    return model.emitError() << role << " symbol " << ref
                             << " of model @" << model.getSymName()
                             << " does not resolve";
  if (!isa<OpT>(target))
    return model.emitError() << role << " symbol " << ref << " of model @"
                             << model.getSymName() << " is a '"
                             << target->getName() << "', expected '" << expected
                             << "'";
  return success();
}

struct LinacVerify : mlir::linac::impl::LinacVerifyPassBase<LinacVerify> {
  void runOnOperation() override {
    bool failed = false;
    getOperation().walk([&](Operation *op) {
      if (auto variant = dyn_cast<VariantOp>(op))
        failed |= mlir::failed(verifyVariant(variant));
      if (auto model = dyn_cast<ModelOp>(op)) {
        failed |= mlir::failed(resolve<VariantOp>(model, model.getLinearAttr(),
                                                  "linear", "linac.variant"));
        failed |= mlir::failed(resolve<AttentionOp>(
            model, model.getAttentionAttr(), "attention", "linac.attention"));
      }
    });
    if (failed)
      signalPassFailure();
  }
};

} // namespace
