//===- linac-opt.cpp - linac optimizer driver ------------------------------===//
//
// mlir-opt for the linac dialect: parses linac (+ arith, math, func) IR, runs
// passes given on the command line and prints the result.
//
//===----------------------------------------------------------------------===//

#include "linac/Dialect/Linac/IR/LinacDialect.h"
#include "linac/Dialect/Linac/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::linac::registerLinacPasses();
  mlir::PassPipelineRegistration<> pipeline(
      "linac-pipeline", "the linac optimisation pipeline",
      [](mlir::OpPassManager &pm) { mlir::linac::buildLinacPipeline(pm); });

  mlir::DialectRegistry registry;
  registry.insert<mlir::linac::LinacDialect, mlir::arith::ArithDialect,
                  mlir::math::MathDialect, mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "linac optimizer driver\n", registry));
}
