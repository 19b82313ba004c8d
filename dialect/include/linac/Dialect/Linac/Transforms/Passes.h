//===- Passes.h - linac passes ----------------------------------*- C++ -*-===//
#ifndef LINAC_DIALECT_LINAC_TRANSFORMS_PASSES_H
#define LINAC_DIALECT_LINAC_TRANSFORMS_PASSES_H

#include "linac/Dialect/Linac/IR/LinacOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace mlir::linac {

#define GEN_PASS_DECL
#include "linac/Dialect/Linac/Transforms/Passes.h.inc"

/// verify, infer-decay-class, canonicalize, differentiate, canonicalize, cse,
/// check-constants, select-algorithm, plan-fused-prologue, verify.
void buildLinacPipeline(OpPassManager &pm);

#define GEN_PASS_REGISTRATION
#include "linac/Dialect/Linac/Transforms/Passes.h.inc"

} // namespace mlir::linac

#endif // LINAC_DIALECT_LINAC_TRANSFORMS_PASSES_H
