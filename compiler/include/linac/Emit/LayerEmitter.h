// The layer description of a compiled variant (runtime/registry/layer.h), printed from the IR
// alone into <name>_register.cpp: inputs with their post-processing, params with their inits, the
// dims rules, where each recurrence and output role comes from, the scale and the output norm;
// and the same as a Python dict for linac.nn (<name>_layer.py).
#pragma once

#include "linac/Dialect/Linac/IR/LinacOps.h"

#include <string>

namespace linac::emit {

/// The name a map's operand `index` goes by in generated code: the spec name of the input, param
/// or index it reads, else "x<index>".
std::string mapOperandName(mlir::Value v, size_t index);

/// `const runtime::LayerDescription kLayer{...};` for `variant`, which has been through the
/// pipeline. Throws std::runtime_error for IR the runtime cannot describe.
std::string layerDescriptionSource(mlir::linac::VariantOp variant);

/// `LAYER = {...}`: the same description as a Python dict for linac.nn (<name>_layer.py), with
/// the dialect's enum words ("key", "silu", "log_uniform", "rmsnorm") and each role as None
/// (absent), "map" (its prologue function) or the name it reads.
std::string layerDescriptionPython(mlir::linac::VariantOp variant);

}  // namespace linac::emit
