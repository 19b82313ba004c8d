//===- LinacSelectAlgorithm.cpp - -linac-select-algorithm ------------------===//

#include "linac/Dialect/Linac/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::linac {
#define GEN_PASS_DEF_LINACSELECTALGORITHMPASS
#include "linac/Dialect/Linac/Transforms/Passes.h.inc"
} // namespace mlir::linac

using namespace mlir;
using namespace mlir::linac;

namespace {

struct LinacSelectAlgorithm
    : mlir::linac::impl::LinacSelectAlgorithmPassBase<LinacSelectAlgorithm> {
  using LinacSelectAlgorithmPassBase::LinacSelectAlgorithmPassBase;

  void runOnOperation() override {
    getOperation().walk([&](RecurrenceOp op) {
      Algorithm algorithm = op.getState() == StateKind::vector
                                ? Algorithm::vector_scan
                            : op.getUpdate() == UpdateRule::additive
                                ? Algorithm::chunk_additive
                                : Algorithm::chunk_delta;
      Builder b(op.getContext());
      op.setAlgorithmAttr(AlgorithmAttr::get(op.getContext(), algorithm));
      auto variant = op->getParentOfType<VariantOp>();
      NamedAttribute chunk(b.getStringAttr("chunk"),
                           b.getI64IntegerAttr(variant.getChunk()));
      op.setTileAttr(b.getDictionaryAttr({chunk}));
    });
  }
};

} // namespace
