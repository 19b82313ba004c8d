// On-demand compilation: a spec that is not in generated/ (or changed since) is compiled to a
// cache folder keyed by its hash and built into a shared library with the host compiler, which
// the runtime then loads (runtime/registry loadVariantLibrary).
#pragma once

#include "linac/Spec/Spec.h"

#include <string>

namespace linac::pipeline {

struct OnDemandOptions {
  std::string cacheDir;       // e.g. ~/.cache/linac; one subfolder per spec hash
  std::string specsDir;       // presets/ and attention.yaml
  std::string runtimeInclude; // the runtime/ folder (registry and kernel contract headers)
  std::string cxx = "c++";    // host compiler
};

/// Path of the shared library for `spec` (read from `specPath`), building it when the cache has
/// none. Writes are atomic (temporary names, then rename), so concurrent runs are safe. Throws
/// std::runtime_error with the compiler's output when the build fails.
std::string buildVariantLibrary(const spec::VariantSpec& spec, const std::string& specPath,
                                const OnDemandOptions& options, std::ostream& log);

}  // namespace linac::pipeline
