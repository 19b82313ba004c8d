//===- LinacPlanFusedPrologue.cpp - -linac-plan-fused-prologue -------------===//
//
// Decides, from the IR alone, which recurrence roles the fused chunk forward
// reads as tiles of inputs and which it computes from raw operands with the
// role's map, and records it as the recurrence's `fused` dictionary (see
// Passes.td for the keys).
//
//===----------------------------------------------------------------------===//

#include "linac/Dialect/Linac/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#include <string>

namespace mlir::linac {
#define GEN_PASS_DEF_LINACPLANFUSEDPROLOGUEPASS
#include "linac/Dialect/Linac/Transforms/Passes.h.inc"
} // namespace mlir::linac

using namespace mlir;
using namespace mlir::linac;

namespace {

/// Operands one fused role may read (runtime/kernels/common/fused.h:
/// kMaxRoleOperands).
constexpr size_t kMaxRoleOperands = 4;

/// How the kernel gets one role.
struct RolePlan {
  std::string tile;       // the input read as the role's tile; empty: computed
  bool normalize = false; // the tile is L2-normalised in the kernel
};

/// The role `value` plays as `role`: a tile when `tileable` and it is an input
/// of `extent`, else computed by its map. Returns the reason when neither fits.
std::string planRole(Value value, StringRef role, Extent extent, bool tileable,
                     RolePlan &out) {
  if (auto in = value.getDefiningOp<InputOp>();
      tileable && in &&
      llvm::cast<FieldType>(in.getType()).getExtent() == extent) {
    out.tile = in.getName().str();
    // Normalised in the kernel only when nothing else reads the input (it
    // then arrives raw).
    out.normalize = in.getL2norm() && !in.getRope() && in->hasOneUse();
    return "";
  }
  auto map = value.getDefiningOp<MapOp>();
  if (!map || !map.getRole() || *map.getRole() != role)
    return (role + " is a plain reference the kernel cannot read as a tile").str();
  if (map.getInputs().size() > kMaxRoleOperands)
    return (role + " reads " + std::to_string(map.getInputs().size()) +
            " operands (the fused kernel takes " +
            std::to_string(kMaxRoleOperands) + ")")
        .str();
  return "";
}

/// The `fused` dictionary of `op`.
FailureOr<DictionaryAttr> plan(RecurrenceOp op) {
  Builder b(op.getContext());
  auto refuse = [&](const std::string &why) {
    return b.getDictionaryAttr(
        {b.getNamedAttr("available", b.getBoolAttr(false)),
         b.getNamedAttr("reason", b.getStringAttr(why))});
  };
  if (op.getDecayClass() == DecayClass::unknown) {
    op.emitError() << "decay class not inferred (run linac-infer-decay-class "
                      "before linac-plan-fused-prologue)";
    return failure();
  }
  if (op.getState() == StateKind::vector)
    return refuse("vector state (the scan reads its operands materialised)");
  RolePlan q, k, v, unused;
  if (std::string why = planRole(op.getQ(), "q", Extent::key, true, q);
      !why.empty())
    return refuse(why);
  if (std::string why = planRole(op.getK(), "k", Extent::key, true, k);
      !why.empty())
    return refuse(why);
  if (!planRole(op.getV(), "v", Extent::value, true, v).empty() ||
      v.tile.empty())
    return refuse("v is not a plain reference to a value input");
  const bool decay = op.getDecay() && op.getDecayClass() != DecayClass::none;
  if (decay)
    if (std::string why =
            planRole(op.getDecay(), "decay", Extent::key, false, unused);
        !why.empty())
      return refuse(why);
  const bool beta = op.getUpdate() == UpdateRule::delta;
  if (beta)
    if (std::string why =
            planRole(op.getBeta(), "beta", Extent::head, false, unused);
        !why.empty())
      return refuse(why);
  return b.getDictionaryAttr(
      {b.getNamedAttr("available", b.getBoolAttr(true)),
       b.getNamedAttr("q", b.getStringAttr(q.tile)),
       b.getNamedAttr("k", b.getStringAttr(k.tile)),
       b.getNamedAttr("v", b.getStringAttr(v.tile)),
       b.getNamedAttr("norm_q", b.getBoolAttr(q.normalize)),
       b.getNamedAttr("norm_k", b.getBoolAttr(k.normalize)),
       b.getNamedAttr("decay", b.getBoolAttr(decay)),
       b.getNamedAttr("beta", b.getBoolAttr(beta))});
}

struct LinacPlanFusedPrologue
    : mlir::linac::impl::LinacPlanFusedProloguePassBase<
          LinacPlanFusedPrologue> {
  void runOnOperation() override {
    getOperation().walk([&](RecurrenceOp op) {
      FailureOr<DictionaryAttr> fused = plan(op);
      if (failed(fused))
        return signalPassFailure();
      op.setFusedAttr(*fused);
    });
  }
};

} // namespace
