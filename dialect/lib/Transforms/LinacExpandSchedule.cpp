//===- LinacExpandSchedule.cpp - -linac-expand-schedule --------------------===//

#include "linac/Dialect/Linac/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::linac {
#define GEN_PASS_DEF_LINACEXPANDSCHEDULEPASS
#include "linac/Dialect/Linac/Transforms/Passes.h.inc"
} // namespace mlir::linac

using namespace mlir;
using namespace mlir::linac;

namespace {

struct LinacExpandSchedule
    : mlir::linac::impl::LinacExpandSchedulePassBase<LinacExpandSchedule> {
  void runOnOperation() override {
    getOperation().walk([&](ModelOp model) {
      std::string error;
      FailureOr<SmallVector<bool>> layers =
          expandSchedule(model.getSchedule(), model.getNumLayers(), error);
      if (failed(layers)) {
        model.emitError() << error;
        return signalPassFailure();
      }
      SmallVector<Attribute> refs;
      for (bool attention : *layers)
        refs.push_back(attention ? model.getAttentionAttr()
                                 : model.getLinearAttr());
      if (llvm::is_contained(refs, Attribute())) {
        model.emitError() << "schedule '" << model.getSchedule()
                          << "' needs both the linear and attention symbols";
        return signalPassFailure();
      }
      model.setLayersAttr(Builder(model.getContext()).getArrayAttr(refs));
    });
  }
};

} // namespace
