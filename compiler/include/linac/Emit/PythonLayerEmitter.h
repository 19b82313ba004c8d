// <name>_layer.py of a compiled variant, for linac.nn (runtime/capi/python/linac_kernels/nn.py):
// the kind, the layer description (LAYER, as LayerEmitter prints it for the runtime) and the
// prologue functions (one per linac.map role) over torch tensors, printed from the IR alone as the
// C++ of <name>.h is. The functions compute elementwise over operands broadcast to one shape;
// their gradients come from torch's autograd (the C++ derivatives are for the kernels).
#pragma once

#include "linac/Dialect/Linac/IR/LinacOps.h"

#include <string>

namespace linac::emit {

/// The module's text. `banner` is the generated-file header (with '#' comments); `specHash`
/// the spec's sha256. Throws std::runtime_error for IR the runtime cannot describe.
std::string pythonLayerSource(mlir::linac::VariantOp variant, const std::string& banner,
                              const std::string& specHash);

}  // namespace linac::emit
