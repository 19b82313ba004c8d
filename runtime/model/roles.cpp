#include "model/roles.h"

#include "prologue/fused_recurrence.h"

#include <stdexcept>

namespace linac::model {

MixerDims resolveDims(const runtime::VariantKernels& kernels, int64_t hidden) {
  const runtime::LayerDescription& layer = kernels.layer;
  MixerDims d;
  d.hidden = hidden;
  d.heads = layer.heads;
  d.valueDim = layer.valueDim.resolve(hidden, layer.heads);
  d.keyDim = kernels.vectorState ? 0 : layer.keyDim.resolve(hidden, layer.heads);
  return d;
}

int64_t extentWidth(runtime::Extent e, const MixerDims& d) {
  switch (e) {
  case runtime::Extent::Scalar: return 1;
  case runtime::Extent::Head: return d.heads;
  case runtime::Extent::Key: return d.heads * d.keyDim;
  case runtime::Extent::Value: return d.heads * d.valueDim;
  case runtime::Extent::Hidden: return d.hidden;
  }
  throw std::invalid_argument("model: unknown extent");
}

std::vector<int64_t> fieldShape(runtime::Extent e, int64_t B, int64_t T, const MixerDims& d,
                                const std::string& name) {
  switch (e) {
  case runtime::Extent::Scalar: return {B, T, 1, 1};
  case runtime::Extent::Head: return {B, T, d.heads, 1};
  case runtime::Extent::Key: return {B, T, d.heads, d.keyDim};
  case runtime::Extent::Value: return {B, T, d.heads, d.valueDim};
  case runtime::Extent::Hidden: break;
  }
  throw std::invalid_argument("model: '" + name +
                              "' has extent hidden, which the linear layer does not support yet");
}

torch::Tensor toKernelLayout(const std::string& role, const torch::Tensor& t, int64_t B, int64_t T,
                             const MixerDims& d, const runtime::VariantKernels& kernels) {
  return prologue::roleLayout(role, t, B, T, d.heads, d.keyDim, d.valueDim, kernels);
}

}  // namespace linac::model
