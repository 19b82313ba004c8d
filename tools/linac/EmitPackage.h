// `linac emit`'s package writer: a self-contained source folder that builds the kernels of some
// variants into a shared library with a C API, installs it as a CMake package
// (find_package(linac_kernels CONFIG) -> linac::kernels) and, beside it, a PyTorch package over
// the C API (python/linac_kernels). What goes in:
//   CMakeLists.txt, cmake/linac_kernelsConfig.cmake.in   (runtime/capi/package/)
//   include/linac_capi.h (runtime/capi/), include/linac_kernels.h (EmitCApi)
//   src/capi*.{h,cpp} (runtime/capi/), src/<variant>_capi.cpp (EmitCApi)
//   generated/<variant>/<variant>.h, manifest.json       (the compiled spec's header and manifest)
//   kernels/common, kernels/cpu                           (runtime/kernels/)
//   kernels/cuda (with hopper/) when the CUDA backend is asked for
//   python/linac_kernels/*.py (runtime/capi/python/), python/linac_kernels/ops.py (EmitPython),
//   python/linac_kernels/layers/<variant>.py (the compiled spec's <variant>_layer.py, for nn.py)
#pragma once

#include "EmitCApi.h"

#include <string>
#include <vector>

namespace linac::cli {

/// One variant to package: its manifest and the text of its generated header.
struct PackagedVariant {
  CApiVariant api;
  std::string header;    // generated/<name>/<name>.h
  std::string manifest;  // generated/<name>/manifest.json, copied into the package beside the header
  std::string layer;     // generated/<name>/<name>_layer.py, the package's python/linac_kernels/layers/<name>.py
};

struct PackageOptions {
  std::string outDir;     // created; must be absent or empty
  std::string runtimeDir; // the repository's runtime/ (kernels/, capi/)
  bool cuda = false;      // copy kernels/cuda and build it by default
  std::string version;    // the package version, MAJOR.MINOR.PATCH
};

/// The contents of a file. Throws std::runtime_error naming the path when it cannot be read.
std::string readText(const std::string& path);

/// Writes the package. Throws std::runtime_error naming the path that failed.
void writePackage(const std::vector<PackagedVariant>& variants, const PackageOptions& options);

}  // namespace linac::cli
