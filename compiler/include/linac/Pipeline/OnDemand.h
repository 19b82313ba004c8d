// On-demand compilation: a spec that is not in generated/ (or changed since) is compiled to a
// cache folder keyed by its hash and built into a shared library, which the runtime then loads
// (runtime/registry loadVariantLibrary). The host side (prologue functions, registration) is built
// with the host compiler; where a GPU architecture is given, the CUDA side (device maps and the
// fused chunk forward, <variant>_cuda.cu) is built into the same library with nvcc.
#pragma once

#include "linac/Spec/Spec.h"

#include <string>

namespace linac::pipeline {

struct OnDemandOptions {
  std::string cacheDir;       // e.g. ~/.cache/linac; one subfolder per spec hash and build
  std::string build;          // the linac that loads the library (`linac --version`): a library
                              // built against another version of the runtime's headers is not reused
  std::string specsDir;       // presets/ and attention.yaml
  std::string runtimeInclude; // the runtime/ folder (registry and kernel contract headers)
  std::string cxx = "c++";    // host compiler
  std::string nvcc;           // CUDA compiler; empty: build the host side only
  std::string cudaArch;       // the GPU to build for, e.g. "sm_90a" (cudaArchFor); with nvcc
};

/// nvcc's name for a GPU of compute capability major.minor: sm_90a on Hopper (its wgmma/TMA
/// features are arch-specific, and the runtime's kernels are built for it), sm_XY elsewhere.
std::string cudaArchFor(int major, int minor);

/// Path of the shared library for `spec` (read from `specPath`), building it when the cache has
/// none (the folder is <name>-<spec hash>-<build hash>): lib<name>.so for the host side alone,
/// lib<name>-<arch>.so with the CUDA side for one architecture. Writes are atomic (temporary
/// names, then rename), so concurrent runs are safe.
/// Throws std::runtime_error with the compiler's output when the build fails.
std::string buildVariantLibrary(const spec::VariantSpec& spec, const std::string& specPath,
                                const OnDemandOptions& options, std::ostream& log);

}  // namespace linac::pipeline
