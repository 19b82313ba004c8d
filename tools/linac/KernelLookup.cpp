#include "KernelLookup.h"

#include "Cli.h"
#include "Version.h"

#ifdef LINAC_HAVE_COMPILER
#include "linac/Pipeline/OnDemand.h"

#include <cstdlib>
#include <iostream>
#ifdef LINAC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#endif

namespace linac::cli {
namespace {

#ifdef LINAC_HAVE_COMPILER
/// $LINAC_CACHE_DIR, else $XDG_CACHE_HOME/linac, else $HOME/.cache/linac.
std::string cacheDir() {
  if (const char* d = std::getenv("LINAC_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/linac";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/linac";
  return "/tmp/linac-cache";
}

/// The on-demand build: the host side, and in a CUDA build with a visible GPU the CUDA side for
/// the current device's architecture with the nvcc this build was configured with.
pipeline::OnDemandOptions onDemandOptions() {
  pipeline::OnDemandOptions o{cacheDir(), versionText(), LINAC_SOURCE_DIR "/specs", LINAC_SOURCE_DIR "/runtime",
                              LINAC_CXX};
#if defined(LINAC_HAVE_CUDA) && defined(LINAC_NVCC)
  int count = 0, device = 0, major = 0, minor = 0;
  if (::cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && ::cudaGetDevice(&device) == cudaSuccess &&
      ::cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      ::cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess) {
    o.nvcc = LINAC_NVCC;
    o.cudaArch = pipeline::cudaArchFor(major, minor);
  } else {
    ::cudaGetLastError();  // no GPU: clear the runtime's sticky error and build the host side
  }
#endif
  return o;
}
#endif

}  // namespace

const runtime::VariantKernels& requireKernels(const spec::VariantSpec& spec, const std::string& specPath) {
  const runtime::VariantKernels* kernels = runtime::Registry::find(spec.name);
  if (kernels && kernels->specHash == spec.hash) return *kernels;
#ifdef LINAC_HAVE_COMPILER
  // Not in generated/ (or generated from another version of the file): compile it now.
  std::string library = pipeline::buildVariantLibrary(spec, specPath, onDemandOptions(), std::cerr);
  const runtime::VariantKernels& loaded = runtime::loadVariantLibrary(library, spec.name);
  if (loaded.specHash != spec.hash)
    throw UsageError(library + " holds another version of " + spec.name + "; delete it and retry");
  return loaded;
#else
  if (!kernels)
    throw UsageError("no generated kernels for '" + spec.name + "' in this build, and it has no compiler "
                     "to build them on demand; run `linac compile " + specPath +
                     " --out generated` on a machine with MLIR and rebuild");
  throw UsageError("generated/" + spec.name + " was generated from another version of " + specPath +
                   " (spec sha256 " + spec.hash.substr(0, 12) + ", generated from " +
                   kernels->specHash.substr(0, 12) + "); regenerate with `linac compile " + specPath +
                   " --out generated` and rebuild");
#endif
}

}  // namespace linac::cli
