// The kernel registry: what the generated code of each compiled spec provides to the runtime.
// generated/<variant>/<variant>_register.cpp fills one VariantKernels and registers it at static
// initialisation; the runtime looks variants up by name. generated/<variant>/<variant>_cuda.cu
// (built with LINAC_ENABLE_CUDA) registers the same prologue maps as device launchers in a
// second table. No torch and no CUDA headers here: generated sources compile against this header
// alone, with the host compiler or nvcc.
#pragma once

#include "kernels/common/fused.h"
#include "kernels/common/recurrence.h"
#include "registry/layer.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

/// The CUDA runtime's stream type, left opaque (cudaStream_t is `CUstream_st*`).
struct CUstream_st;

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

/// How the chunk kernels can compute the recurrence's roles themselves (kernels/common/fused.h):
/// planned by linac-plan-fused-prologue. `available` is false for a variant whose roles do not
/// fit the fused forward (vector state, a computed v, a role with more than kMaxRoleOperands
/// operands); it then runs composed (prologue maps, then the kernels).
struct FusedPlan {
  bool available = false;
  std::string qTile, kTile, vTile;  // input read as the role's tile; empty: computed by its map
  bool normQ = false, normK = false;  // that input is L2-normalised in the kernel, not before it
  std::string bonus;                  // exclusive_bonus: the [H, dk] parameter read as u
};

/// Everything the generated code knows about one linear variant.
struct VariantKernels {
  std::string name;
  std::string specHash;  // sha256 of the spec file the code was generated from
  kernels::RecurrenceKind kind;
  bool vectorState = false;
  int chunk = 64;
  std::vector<PrologueMap> maps;
  FusedPlan fused;
  LayerDescription layer;  // what the runtime builds the layer from (registry/layer.h)

  /// The map for `role`, or null when the role is a plain reference (no expression).
  const PrologueMap* find(std::string_view role) const;
  /// Whether training learns the decay, so that a backward is asked for d_g: the decay is an input
  /// itself, or its map reads an input or a parameter. RetNet's log(1 - 2^(-5 - head)) reads only
  /// the head index: a constant per head, with no gradient to compute.
  bool learnsDecay() const;
};

/// Rank of the index space the device maps run over; results of lower rank are padded with
/// leading dims of size 1.
inline constexpr int kDeviceMapRank = 4;

/// One float32 operand in device memory. Element (i0, i1, i2, i3) of the result reads
/// data[i0 * strides[0] + i1 * strides[1] + i2 * strides[2] + i3 * strides[3]]; a stride of 0
/// broadcasts the operand along that dim, so it is never expanded to the result's shape.
struct StridedOperand {
  const float* data = nullptr;
  int64_t strides[kDeviceMapRank] = {0, 0, 0, 0};
};

/// The sizes of a device map's result, which is contiguous (row-major) float32.
struct MapShape {
  int64_t sizes[kDeviceMapRank] = {1, 1, 1, 1};
};

/// out[i] = role(args[0][i], args[1][i], ...) for every element i of `shape`, launched on
/// `stream`. Throws std::runtime_error when the launch fails.
using DeviceMapForwardFn = void (*)(const StridedOperand* args, float* out, const MapShape& shape,
                                    CUstream_st* stream);
/// The chain rule through the role: grads[j][i] = grad[i] * d role / d args[j] at element i, with
/// grads[j] of the result's shape; a null grads[j] is skipped. Launched on `stream`.
using DeviceMapPartialsFn = void (*)(const StridedOperand* args, const StridedOperand& grad,
                                     float* const* grads, const MapShape& shape,
                                     CUstream_st* stream);

/// A prologue map's CUDA launchers (generated/<variant>/<variant>_cuda.cu).
struct DeviceMap {
  std::string role;
  DeviceMapForwardFn forward = nullptr;
  DeviceMapPartialsFn partials = nullptr;  // null when linac-differentiate derived none for the role
};

/// The chunk forward with the variant's prologue computed in the kernel, launched on `stream`.
/// Throws std::invalid_argument for shapes or dtypes it does not take.
using FusedForwardFn = void (*)(const kernels::FusedForwardArgs& args, CUstream_st* stream);

/// The device maps of one variant, generated from the spec with sha256 `specHash`.
struct VariantDeviceMaps {
  std::string name;
  std::string specHash;
  std::vector<DeviceMap> maps;
  FusedForwardFn fusedForward = nullptr;  // null when the variant's FusedPlan is not available

  const DeviceMap* find(std::string_view role) const;
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

  /// Registers a variant's device maps. Throws when another set of the same name is registered,
  /// unless a ReplaceScope is active (as for add).
  static void addDevice(const VariantDeviceMaps* maps);
  /// The device launchers of `map`, one of the maps of a registered variant. Null when none are
  /// linked in for that variant at the same spec hash (a build without CUDA, or a variant
  /// compiled on demand on a machine without a GPU, where only its host side is built).
  static const DeviceMap* findDevice(const PrologueMap& map);
  /// The fused chunk forward of `variant` (at its spec hash), or null when none is linked in.
  static FusedForwardFn findFusedForward(const VariantKernels& variant);
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

/// Registers at static initialisation: `const DeviceRegistration r(&deviceMaps);` in generated code.
struct DeviceRegistration {
  explicit DeviceRegistration(const VariantDeviceMaps* maps) { Registry::addDevice(maps); }
};

}  // namespace linac::runtime
