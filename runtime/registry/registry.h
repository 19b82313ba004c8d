// The kernel registry: what the generated code of each compiled spec provides to the runtime.
// generated/<variant>/<variant>_register.cpp fills one VariantKernels and registers it at static
// initialisation; the runtime looks variants up by name. No torch here: generated sources compile
// against this header alone.
#pragma once

#include "kernels/common/recurrence.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace linac::runtime {

/// One prologue role, elementwise over n operands that the caller has already broadcast to the
/// result's shape: out[i] = role(args[0][i], args[1][i], ...).
using MapForwardFn = void (*)(const float* const* args, float* out, int64_t n);
/// partials[j][i] = d role / d args[j] at element i.
using MapPartialsFn = void (*)(const float* const* args, float* const* partials, int64_t n);

/// A prologue expression of the spec (decay, beta, q, k, v, gate, residual) as compiled.
struct PrologueMap {
  std::string role;
  std::vector<std::string> args;  // spec names of the operands: inputs, params, head/layer/...
  MapForwardFn forward = nullptr;
  MapPartialsFn partials = nullptr;  // null when linac-differentiate derived none for the role
};

/// Everything the generated code knows about one linear variant.
struct VariantKernels {
  std::string name;
  std::string specHash;  // sha256 of the spec file the code was generated from
  kernels::RecurrenceKind kind;
  bool vectorState = false;
  int chunk = 64;
  std::vector<PrologueMap> maps;

  /// The map for `role`, or null when the role is a plain reference (no expression).
  const PrologueMap* find(std::string_view role) const;
};

/// Process-wide table of the variants linked into this binary or loaded from compiled-on-demand
/// shared libraries.
class Registry {
public:
  /// Throws when another variant of the same name is registered, unless a ReplaceScope is
  /// active (loading a freshly compiled version of a spec that generated/ also has).
  static void add(const VariantKernels* variant);
  /// Null when no variant of that name is linked in.
  static const VariantKernels* find(const std::string& name);
  static std::vector<const VariantKernels*> all();
};

/// While alive, registrations replace same-named variants instead of failing.
class ReplaceScope {
public:
  ReplaceScope();
  ~ReplaceScope();
  ReplaceScope(const ReplaceScope&) = delete;
  ReplaceScope& operator=(const ReplaceScope&) = delete;
};

/// Loads a shared library built from generated sources (its static initialisers register the
/// variant) and returns the variant named `name`. Throws std::runtime_error with dlerror().
const VariantKernels& loadVariantLibrary(const std::string& path, const std::string& name);

/// Registers at static initialisation: `const Registration r(&kernels);` in generated code.
struct Registration {
  explicit Registration(const VariantKernels* variant) { Registry::add(variant); }
};

}  // namespace linac::runtime
