// Prints the scalar f32 arith/math body of a linac.map region as C++ statements that compile
// unchanged as host C++ and as CUDA device code (float math functions: expf, log1pf, ...), or as
// Python statements over torch tensors (the same body elementwise, for linac.nn).
#pragma once

#include "mlir/IR/Block.h"

#include <string>
#include <vector>

namespace linac::emit {

/// The language a map body is printed in.
enum class ScalarLanguage {
  Cpp,    // `const float tN = expf(x);`
  Torch,  // `tN = torch.exp(x)`; constants are float32 0-dim tensors
};

/// The statements computing a map body, one per op, followed by the names holding the yielded
/// values. `argNames[i]` names block argument i.
struct ScalarCode {
  std::vector<std::string> statements;
  std::vector<std::string> results;
};

/// Throws std::runtime_error naming the op when the body holds an op it cannot print.
ScalarCode emitScalarBody(mlir::Block& body, const std::vector<std::string>& argNames,
                          ScalarLanguage language = ScalarLanguage::Cpp);

}  // namespace linac::emit
