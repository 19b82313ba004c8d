#include "model/roles.h"

#include "prologue/fused_recurrence.h"

#include <stdexcept>

namespace linac::model {

MixerDims resolveDims(const spec::VariantSpec& spec, int64_t hidden) {
  auto given = [](const spec::DimSpec& s) { return s.absolute > 0 || s.expand > 0.0; };
  MixerDims d;
  d.hidden = hidden;
  d.heads = spec.heads;
  if (given(spec.keyDim)) d.keyDim = spec.keyDim.resolve(hidden, spec.heads);
  d.valueDim = given(spec.valueDim) ? spec.valueDim.resolve(hidden, spec.heads) : d.keyDim;
  if (spec.recurrence.state == spec::StateKind::Vector) d.keyDim = 0;
  return d;
}

int64_t extentWidth(spec::Extent e, const MixerDims& d) {
  switch (e) {
  case spec::Extent::Scalar: return 1;
  case spec::Extent::Head: return d.heads;
  case spec::Extent::Key: return d.heads * d.keyDim;
  case spec::Extent::Value: return d.heads * d.valueDim;
  case spec::Extent::Hidden: return d.hidden;
  }
  throw std::invalid_argument("model: unknown extent");
}

std::vector<int64_t> fieldShape(spec::Extent e, int64_t B, int64_t T, const MixerDims& d,
                                const std::string& name) {
  switch (e) {
  case spec::Extent::Scalar: return {B, T, 1, 1};
  case spec::Extent::Head: return {B, T, d.heads, 1};
  case spec::Extent::Key: return {B, T, d.heads, d.keyDim};
  case spec::Extent::Value: return {B, T, d.heads, d.valueDim};
  case spec::Extent::Hidden: break;
  }
  throw std::invalid_argument("model: '" + name +
                              "' has extent hidden, which the linear layer does not support yet");
}

torch::Tensor toKernelLayout(const std::string& role, const torch::Tensor& t, int64_t B, int64_t T,
                             const MixerDims& d, const runtime::VariantKernels& kernels) {
  return prologue::roleLayout(role, t, B, T, d.heads, d.keyDim, d.valueDim, kernels);
}

}  // namespace linac::model
