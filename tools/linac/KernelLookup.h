// Finding a spec's generated kernels in this build, with the errors users need when they are
// missing or were generated from another version of the spec.
#pragma once

#include "linac/Spec/Spec.h"
#include "registry/registry.h"

#include <string>

namespace linac::cli {

/// Throws UsageError (with the command to fix it) when the build has no generated code for the
/// spec or the code was generated from a different version of the file.
const runtime::VariantKernels& requireKernels(const spec::VariantSpec& spec, const std::string& specPath);

}  // namespace linac::cli
