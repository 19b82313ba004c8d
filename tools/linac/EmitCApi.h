// The per-variant part of an emitted package's C API (`linac emit`): the declarations in
// include/linac_kernels.h and the wrappers in src/<variant>_capi.cpp, derived from the variant's
// manifest (state, decay class, update rule, readout). The wrappers call runtime/capi with the
// generated header's kKind and kChunk and static_assert that they match the manifest.
#pragma once

#include <string>
#include <vector>

namespace linac::cli {

/// What the C API of one variant depends on, read from generated/<variant>/manifest.json.
struct CApiVariant {
  std::string name;
  std::string specHash;
  bool vectorState = false;
  std::string decayClass;  // none | fixed | scalar | diagonal
  std::string update;      // additive | delta
  std::string readout;     // inclusive | exclusive_bonus
};

/// The gates a matrix-state variant takes beside q, k, v, in the contract's order: the log-decay
/// g (unless the decay class is none), the delta rule's beta, the exclusive readout's bonus u.
std::vector<std::string> gates(const CApiVariant& v);

/// Parses a manifest; throws std::runtime_error naming `where` when a field is missing.
CApiVariant parseManifest(const std::string& manifestJson, const std::string& where);

/// include/linac_kernels.h for these variants.
std::string emitCApiHeader(const std::vector<CApiVariant>& variants, const std::string& version);

/// src/<variant>_capi.cpp.
std::string emitCApiSource(const CApiVariant& variant);

}  // namespace linac::cli
