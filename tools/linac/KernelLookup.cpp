#include "KernelLookup.h"

#include "Args.h"

namespace linac::cli {

const runtime::VariantKernels& requireKernels(const spec::VariantSpec& spec, const std::string& specPath) {
  const runtime::VariantKernels* kernels = runtime::Registry::find(spec.name);
  if (!kernels)
    throw UsageError("no generated kernels for '" + spec.name + "' in this build; run `linac compile " +
                     specPath + " --out generated` and rebuild (on-demand compilation is not there yet)");
  if (kernels->specHash != spec.hash)
    throw UsageError("generated/" + spec.name + " was generated from another version of " + specPath +
                     " (spec sha256 " + spec.hash.substr(0, 12) + ", generated from " +
                     kernels->specHash.substr(0, 12) + "); regenerate with `linac compile " + specPath +
                     " --out generated` and rebuild");
  return *kernels;
}

}  // namespace linac::cli
