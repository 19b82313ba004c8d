//===- Pipeline.cpp - the linac optimisation pipeline ----------------------===//

#include "linac/Dialect/Linac/Transforms/Passes.h"

#include "mlir/Transforms/Passes.h"

void mlir::linac::buildLinacPipeline(OpPassManager &pm) {
  pm.addPass(createLinacVerifyPass());
  pm.addPass(createLinacInferDecayClassPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createLinacDifferentiatePass());
  // Fold the arith in the new gradient bodies (gradient maps are kept).
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // After the last fold: no inf or nan constant reaches the emitters.
  pm.addPass(createLinacCheckConstantsPass());
  pm.addPass(createLinacSelectAlgorithmPass());
  pm.addPass(createLinacPlanFusedProloguePass());
  pm.addPass(createLinacVerifyPass());
}
