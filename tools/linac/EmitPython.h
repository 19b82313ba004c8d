// The generated part of an emitted package's PyTorch package (`linac emit`): python/linac_kernels/
// ops.py, one fla-style function chunk_<variant> per variant over the torch.library ops that
// runtime/capi/python/linac_kernels/_recurrence.py (matrix state, from the variant's kind) or
// _scan.py (vector state) registers.
#pragma once

#include "EmitCApi.h"

#include <string>
#include <vector>

namespace linac::cli {

/// python/linac_kernels/ops.py for these variants.
std::string emitPythonOps(const std::vector<CApiVariant>& variants);

}  // namespace linac::cli
