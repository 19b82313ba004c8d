// The linear-attention mixer of one layer, built from the registry's description of a compiled
// variant (registry/layer.h; one class for every variant): per-input projections with their
// post-processing, the roles (compiled prologue maps, or the oracle's evaluation of the spec's
// expressions), the recurrence (generated kernels or the float64 oracle), then the output stage
// (residual, norm, gate) and W_o. Only the oracle backend reads a spec: it judges the spec's
// expressions independently of the compiler.
#pragma once

#include "model/cache.h"
#include "model/documents.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/roles.h"
#include "registry/registry.h"

#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>

namespace linac::model {

/// RoPE on spec inputs (RetNet's q, k): the spec has no theta field; fla's default.
inline constexpr double kInputRopeTheta = 10000.0;

class LinearMixerImpl : public torch::nn::Module {
public:
  /// `layer` (0-based) and `numLayers` are the values of the expressions' `layer` and
  /// `num_layers`. `oracleSpec`, the variant's spec, is required by (and only read by) the
  /// Oracle backend. Throws std::invalid_argument when the layer uses something it does not
  /// support (extent hidden) or the Oracle backend has no spec.
  LinearMixerImpl(const runtime::VariantKernels& kernels, int64_t hidden, int64_t layer, int64_t numLayers,
                  MixerBackend backend, const spec::VariantSpec* oracleSpec = nullptr);

  /// The parameters a layer of this variant has at width `hidden` (names, shapes, inits).
  static Plan plan(const runtime::VariantKernels& kernels, int64_t hidden);

  /// x [B, T, hidden] -> [B, T, hidden]; with `documents`, each packed document of x's rows is a
  /// sequence of its own (model/documents.h).
  torch::Tensor forward(const torch::Tensor& x, const Documents* documents = nullptr);

  /// A fresh (zero) cache for `batch` sequences: the state in fp32 on `options`' device, conv and
  /// token-shift inputs in `options`' dtype (linear_layer_cached.cpp).
  LinearLayerCache makeCache(int64_t batch, const torch::TensorOptions& options) const;
  /// x [B, T, hidden], the next T tokens of the sequences `cache` holds (the first at `position`)
  /// -> [B, T, hidden]; updates the cache in place. T > 1 runs the chunk kernels from the cached
  /// state (prefill), T = 1 the decode-step kernel (the scan for a vector state). Kernels
  /// backend only, without gradients. Equals forward() over the whole sequence. rowPositions [B]
  /// (one token, rows of different lengths; else undefined): row b's token is at rowPositions[b].
  torch::Tensor forwardCached(const torch::Tensor& x, LinearLayerCache& cache, int64_t position,
                              const torch::Tensor& rowPositions = {});

private:
  using Env = std::map<std::string, torch::Tensor>;

  /// Parameters and the structural names (head, layer, num_layers...) the expressions read.
  void addParamsAndStructure(Env& env, const torch::Tensor& x) const;
  /// input() continuing the cached sequences: token shift from the cached last input, the short
  /// conv over the cached last W - 1 projected values (both updated), RoPE from `position` (or
  /// rowPositions);
  /// `step`: L2-normalised here even when the fused kernel would do it.
  torch::Tensor cachedInput(const runtime::InputDescription& in, const torch::Tensor& x, LinearLayerCache& cache,
                            int64_t position, const torch::Tensor& rowPositions, bool step) const;
  /// The recurrence of T tokens through the chunk kernels from cache.state; o [B, T, H, dv].
  torch::Tensor prefillRecurrence(const Env& env, LinearLayerCache& cache, int64_t B, int64_t T) const;
  /// One token through the decode-step kernel; o [B, 1, H, dv].
  torch::Tensor stepRecurrence(const Env& env, LinearLayerCache& cache, int64_t B) const;

  /// One input after token shift, projection, conv, activation, L2 norm (unless the fused kernel
  /// normalises it) and RoPE: field layout. With `documents`, the shift, conv and RoPE restart
  /// at each document.
  torch::Tensor input(const runtime::InputDescription& in, const torch::Tensor& x, const Documents* documents) const;
  /// Whether the fused recurrence L2-normalises `input` itself (runtime::FusedPlan).
  bool normalizedInKernel(const std::string& input) const;
  /// A role's value on the Kernels backend (field layout, x's dtype and device): its prologue
  /// map, or the value `source` names.
  torch::Tensor kernelRole(const std::string& role, const runtime::RoleSource& source, const Env& env) const;
  /// A role's value on the backend: `expr` is the spec's expression for it (Oracle backend).
  torch::Tensor role(const std::string& role, const runtime::RoleSource& source, const spec::ExprPtr& expr,
                     const Env& env, bool oracle) const;
  /// The readout scale: the variant's, else key_dim^-0.5.
  double scale() const;
  /// Roles, recurrence and output stage over `env`; oracle: float64 on the CPU. -> [B, T, H * dv].
  /// cuSeqlens (B = 1, or undefined): the packed sequences the recurrence runs separately.
  torch::Tensor mix(const Env& env, int64_t B, int64_t T, bool oracle, const torch::Tensor& cuSeqlens) const;
  /// The output stage: residual, norm, gate; o [B, T, H, dv] -> [B, T, H * dv].
  torch::Tensor output(torch::Tensor o, const Env& env, int64_t B, int64_t T, bool oracle) const;
  torch::Tensor norm(const torch::Tensor& o) const;

  const runtime::VariantKernels* kernels_ = nullptr;
  const runtime::LayerDescription* layer_ = nullptr;  // kernels_->layer
  std::optional<spec::VariantSpec> oracleSpec_;        // Oracle backend only
  MixerDims dims_;
  int64_t layerIndex_ = 0, numLayers_ = 0;
  MixerBackend backend_;
  std::map<std::string, torch::Tensor> params_;
};
TORCH_MODULE(LinearMixer);

}  // namespace linac::model
