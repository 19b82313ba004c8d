// The layer description of a compiled variant (runtime/registry/layer.h), printed from the IR
// alone into <name>_register.cpp: inputs with their post-processing, params with their inits, the
// dims rules, where each recurrence and output role comes from, the scale and the output norm.
#pragma once

#include "linac/Dialect/Linac/IR/LinacOps.h"

#include <string>

namespace linac::emit {

/// `const runtime::LayerDescription kLayer{...};` for `variant`, which has been through the
/// pipeline. Throws std::runtime_error for IR the runtime cannot describe.
std::string layerDescriptionSource(mlir::linac::VariantOp variant);

}  // namespace linac::emit
