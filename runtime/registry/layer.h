// The layer description: everything the runtime builds a linear layer from, besides the prologue
// functions and the recurrence kind. The emitter writes it into generated/<v>/<v>_register.cpp
// from the compiled IR alone (linac.variant, linac.input, linac.param, linac.recurrence,
// linac.output), so the runtime never reads the spec. No torch and no CUDA headers here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace linac::runtime {

/// The per-token size of a value within one head (linac's !linac.field extents).
enum class Extent { Scalar, Head, Key, Value, Hidden };
enum class Activation { None, Silu, Sigmoid, Relu, Tanh, Elu1 };
/// How a parameter starts (specs/README.md, params.init): Constant a; Normal std a; Uniform,
/// LogUniform [a, b]; DtBias Mamba's inverse softplus of a log-uniform dt in [a, b].
enum class InitKind { Zeros, Ones, Constant, Normal, Uniform, LogUniform, DtBias };
enum class NormKind { None, RMSNorm, GroupNorm, LayerNorm };

/// A per-head size: `absolute` when > 0, else `expand` * hidden split over the heads.
struct DimRule {
  int64_t absolute = 0;
  double expand = 0.0;
  /// The per-head size at model width `hidden`. Throws std::invalid_argument when expand *
  /// hidden is not a whole number divisible by `heads`.
  int64_t resolve(int64_t hidden, int64_t heads) const;
};

/// A per-token projection of the layer input x and its post-processing, in this order: token
/// shift, low-rank factorisation, projection (+ bias), short causal conv, activation, L2 norm over
/// the extent, RoPE.
struct InputDescription {
  std::string name;
  Extent extent = Extent::Key;
  int64_t lowRank = 0;  // > 0: x -> rank -> extent
  int64_t conv = 0;     // > 0: the conv's width
  Activation activation = Activation::None;
  bool l2norm = false;
  bool tokenShift = false;
  bool bias = false;
  bool rope = false;
};

/// A learned parameter, constant over tokens: [H, d] for extent Key / Value, [H] for Head,
/// one value for Scalar.
struct ParamDescription {
  std::string name;
  Extent extent = Extent::Head;
  InitKind init = InitKind::Zeros;
  double a = 0.0, b = 0.0;
};

/// Where a recurrence or output role comes from.
struct RoleSource {
  bool present = false;
  std::string name;  // the input, param or index read as it is; empty: the role's prologue map
};

/// One linear layer (the spec's inputs, params, roles and output stage, as compiled).
struct LayerDescription {
  int64_t heads = 0;
  DimRule keyDim, valueDim;  // vector state: valueDim is the channel count per head
  std::vector<InputDescription> inputs;
  std::vector<ParamDescription> params;
  RoleSource q, k, v, decay, beta;
  std::string bonus;            // exclusive_bonus readout: the [H, dk] parameter u
  std::optional<double> scale;  // absent: key_dim^-0.5 at the layer's width
  NormKind norm = NormKind::None;
  RoleSource gate, residual;  // gate multiplies the normed output; residual is added before it
};

}  // namespace linac::runtime
