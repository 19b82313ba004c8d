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
    if (target != "cpu" && target != "cuda") {
      getOperation().emitError()
          << "linac-select-algorithm: unknown target '" << target
          << "', expected 'cpu' or 'cuda'";
      return signalPassFailure();
    }
    bool cuda = target == "cuda";
    getOperation().walk([&](RecurrenceOp op) {
      Algorithm algorithm = op.getState() == StateKind::vector
                                ? Algorithm::vector_scan
                            : op.getUpdate() == UpdateRule::additive
                                ? Algorithm::chunk_additive
                                : Algorithm::chunk_delta;
      Builder b(op.getContext());
      op.setAlgorithmAttr(AlgorithmAttr::get(op.getContext(), algorithm));
      auto variant = op->getParentOfType<VariantOp>();
      SmallVector<NamedAttribute> tile;
      tile.emplace_back(b.getStringAttr("chunk"),
                        b.getI64IntegerAttr(variant.getChunk()));
      if (algorithm != Algorithm::vector_scan) {
        tile.emplace_back(
            b.getStringAttr("block_v"),
            b.getI64IntegerAttr(std::min<int64_t>(64, variant.getValueDim())));
        if (cuda)
          tile.emplace_back(b.getStringAttr("num_warps"),
                            b.getI64IntegerAttr(4));
      }
      op.setTileAttr(b.getDictionaryAttr(tile));
    });
  }
};

} // namespace
