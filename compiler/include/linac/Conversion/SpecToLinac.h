// Building linac-dialect IR from parsed specs: one linac.variant (or linac.attention) for the
// spec, the attention layer it is hybridised with, and a linac.model holding the schedule.
#pragma once

#include "linac/Spec/Spec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace linac {

/// The model a variant is compiled for: the preset resolves expand-ratio dimensions, the
/// attention spec and schedule fill the linac.model op.
struct ModelContext {
  const spec::PresetSpec* preset = nullptr;     // required
  const spec::VariantSpec* attention = nullptr; // the full-attention spec; null: none
  const spec::ScheduleSpec* schedule = nullptr; // null: pure
};

/// Throws spec::SpecError (with the spec location) when the spec cannot be expressed, e.g. a
/// dimension that does not divide by the heads.
mlir::OwningOpRef<mlir::ModuleOp> buildModule(mlir::MLIRContext& context,
                                              const spec::VariantSpec& variant,
                                              const ModelContext& model);

/// Registers the dialects the built IR uses (linac, arith, math).
void registerDialects(mlir::MLIRContext& context);

}  // namespace linac
