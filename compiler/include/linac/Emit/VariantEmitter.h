// Emits the generated files of one compiled spec from its optimised linac IR alone (the spec's
// path and hash are attributes of the module):
//   <name>/<name>.h        kind constants, the prologue functions (one per
//                          linac.map role) and their derivatives (from linac-differentiate),
//                          compiled unchanged by the host compiler and nvcc
//   <name>/<name>_register.cpp  host loops over those functions and the layer description,
//                          registered with the runtime
//   <name>/<name>_cuda.cu  the same functions as CUDA kernels over strided operands (device maps),
//                          registered with the runtime; built only with LINAC_ENABLE_CUDA
//   <name>/<name>_layer.py the layer description and the prologue functions in torch (linac.nn)
//   <name>/manifest.json   what the runtime and `linac emit` need to know without C++
#pragma once

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>

namespace linac::emit {

/// Relative path -> contents. Throws std::runtime_error when the IR is not in the form the
/// pipeline produces (e.g. a recurrence without a selected algorithm), or when an operand name
/// would shadow a name the device kernels use.
std::map<std::string, std::string> emitVariantFiles(mlir::ModuleOp module);

}  // namespace linac::emit
