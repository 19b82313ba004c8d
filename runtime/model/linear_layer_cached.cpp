// The linear mixer continuing cached sequences (inference): the prologue of the next tokens from
// the cached conv / token-shift inputs, then the recurrence from the cached state, through the
// chunk kernels for a prompt (prefill) or the decode-step kernel for one token.
#include "model/linear_layer.h"

#include "ops/recurrence_ops.h"
#include "prologue/fused_recurrence.h"

#include <cmath>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace linac::model {

LinearLayerCache LinearMixerImpl::makeCache(int64_t batch, const torch::TensorOptions& options) const {
  const MixerDims& d = dims_;
  LinearLayerCache c;
  const torch::TensorOptions f32 = options.dtype(torch::kFloat32);
  c.state = kernels_->vectorState ? torch::zeros({batch, d.heads * d.valueDim}, f32)          // [B, H * dv]
                                  : torch::zeros({batch, d.heads, d.keyDim, d.valueDim}, f32);  // [B, H, dk, dv]
  bool shifted = false;
  for (const auto& in : layer_->inputs) {
    if (in.conv > 0) c.conv[in.name] = torch::zeros({batch, in.conv - 1, extentWidth(in.extent, d)}, options);
    shifted = shifted || in.tokenShift;
  }
  if (shifted) c.shift = torch::zeros({batch, d.hidden}, options);  // [B, hidden]
  return c;
}

torch::Tensor LinearMixerImpl::cachedInput(const runtime::InputDescription& in, const torch::Tensor& x, LinearLayerCache& cache,
                                           int64_t position, const torch::Tensor& rowPositions, bool step) const {
  const int64_t B = x.size(0), T = x.size(1);
  torch::Tensor h = x;  // [B, T, hidden]
  if (in.tokenShift) {
    // x_{t-1}: the cached last input before the first token
    torch::Tensor prev = torch::cat({cache.shift.to(x.scalar_type()).unsqueeze(1), x.narrow(1, 0, T - 1)}, 1);
    h = x + params_.at("shift_" + in.name) * (prev - x);
  }
  if (in.lowRank > 0) h = torch::linear(h, params_.at("down_" + in.name));  // [B, T, rank]
  h = torch::linear(h, params_.at("proj_" + in.name),
                    in.bias ? params_.at("bias_" + in.name) : torch::Tensor());  // [B, T, width]
  if (in.conv > 0) {
    torch::Tensor& past = cache.conv.at(in.name);                           // [B, W - 1, width]
    torch::Tensor full = torch::cat({past.to(h.scalar_type()), h}, 1);      // [B, W - 1 + T, width]
    const int64_t width = h.size(2);
    const std::vector<int64_t> unit = {1}, none = {0};  // stride and dilation 1; no padding: the past is cached
    h = torch::conv1d(full.transpose(1, 2), params_.at("conv_" + in.name), {}, unit, none, unit, /*groups=*/width)
            .transpose(1, 2);  // [B, T, width]
    past.copy_(full.narrow(1, T, in.conv - 1));
  }
  h = activate(h, in.activation);
  h = h.reshape(fieldShape(in.extent, B, T, dims_, in.name));  // [B, T, H|1, dk|dv|1]
  if (in.l2norm && (step || !normalizedInKernel(in.name))) h = l2Normalize(h);
  if (in.rope)
    h = rowPositions.defined() ? ropeAt(h, kInputRopeTheta, rowPositions.view({B, T})) : rope(h, kInputRopeTheta, position);
  return h;
}

torch::Tensor LinearMixerImpl::prefillRecurrence(const Env& env, LinearLayerCache& cache, int64_t B, int64_t T) const {
  const runtime::LayerDescription& l = *layer_;
  const MixerDims& d = dims_;
  torch::Tensor o, ht;  // o [B, T, H, dv]; ht like cache.state
  if (kernels_->fused.available) {
    prologue::FusedOptions opt;
    opt.keyDim = d.keyDim;
    opt.scale = scale();
    opt.chunk = kernels_->chunk;
    opt.outputFinalState = true;
    opt.h0 = cache.state;
    std::tie(o, ht) = prologue::fusedRecurrence(*kernels_, env, opt);
  } else {
    auto role = [&](const std::string& name, const runtime::RoleSource& source) {
      return toKernelLayout(name, kernelRole(name, source, env), B, T, d, *kernels_);
    };
    const bool decayed = kernels_->kind.decay != kernels::DecayClass::None && l.decay.present;
    torch::Tensor g = decayed ? role("decay", l.decay) : torch::Tensor();
    torch::Tensor v = role("v", l.v);
    if (kernels_->vectorState) {
      std::tie(o, ht) = ops::scan(v, g, cache.state, {}, true);  // [B, T, H * dv], [B, H * dv]
      o = o.view({B, T, d.heads, d.valueDim});
    } else {
      torch::Tensor q = role("q", l.q), k = role("k", l.k);  // [B, T, H, dk]
      torch::Tensor beta = kernels_->kind.update == kernels::UpdateRule::Delta ? role("beta", l.beta)
                                                                               : torch::Tensor();  // [B, T, H]
      torch::Tensor u = kernels_->kind.readout == kernels::Readout::ExclusiveBonus
                            ? toKernelLayout("u", env.at(l.bonus), B, T, d, *kernels_)
                            : torch::Tensor();  // [H, dk]
      toCommonKernelDtype(q, k, v);
      ops::RecurrenceOptions opt{kernels_->kind, scale(), kernels_->chunk, true};
      std::tie(o, ht) = ops::recurrence({q, k, v, g, beta, u, cache.state, {}}, opt);
    }
  }
  cache.state.copy_(ht);
  return o;
}

torch::Tensor LinearMixerImpl::stepRecurrence(const Env& env, LinearLayerCache& cache, int64_t B) const {
  const runtime::LayerDescription& l = *layer_;
  const MixerDims& d = dims_;
  auto role = [&](const std::string& name, const runtime::RoleSource& source) {
    return toKernelLayout(name, kernelRole(name, source, env), B, 1, d, *kernels_);
  };
  auto token = [](const torch::Tensor& t) { return t.defined() ? t.select(1, 0) : t; };  // drop T = 1
  const bool decayed = kernels_->kind.decay != kernels::DecayClass::None && l.decay.present;
  torch::Tensor g = decayed ? role("decay", l.decay) : torch::Tensor();
  torch::Tensor v = role("v", l.v);
  if (kernels_->vectorState) {  // one step of the scan: v, g [B, 1, H * dv]
    auto [h, ht] = ops::scan(v, g, cache.state, {}, true);
    cache.state.copy_(ht);
    return h.view({B, 1, d.heads, d.valueDim});
  }
  torch::Tensor q = token(role("q", l.q)), k = token(role("k", l.k));  // [B, H, dk]
  v = token(v);                                                        // [B, H, dv]
  if (kernels_->kind.decay != kernels::DecayClass::Fixed) g = token(g);  // [B, H] or [B, H, dk]; fixed: [H]
  torch::Tensor beta = kernels_->kind.update == kernels::UpdateRule::Delta ? token(role("beta", l.beta))
                                                                           : torch::Tensor();  // [B, H]
  torch::Tensor u = kernels_->kind.readout == kernels::Readout::ExclusiveBonus
                        ? toKernelLayout("u", env.at(l.bonus), B, 1, d, *kernels_)
                        : torch::Tensor();  // [H, dk]
  toCommonKernelDtype(q, k, v);
  ops::RecurrenceOptions opt{kernels_->kind, scale(), kernels_->chunk, false};
  return ops::recurrenceStep({q, k, v, g, beta, u, {}, {}}, cache.state, opt).unsqueeze(1);  // [B, 1, H, dv]
}

torch::Tensor LinearMixerImpl::forwardCached(const torch::Tensor& x, LinearLayerCache& cache, int64_t position,
                                             const torch::Tensor& rowPositions) {
  if (backend_ != MixerBackend::Kernels)
    throw std::invalid_argument("model: cached inference runs the generated kernels; build the model with "
                                "MixerBackend::Kernels, not the oracle");
  const int64_t B = x.size(0), T = x.size(1);
  const bool step = T == 1;
  Env env;  // field layout (roles.h), x's dtype and device
  for (const auto& in : layer_->inputs) env[in.name] = cachedInput(in, x, cache, position, rowPositions, step);
  if (cache.shift.defined()) cache.shift.copy_(x.select(1, T - 1));
  addParamsAndStructure(env, x);
  torch::Tensor o = step ? stepRecurrence(env, cache, B) : prefillRecurrence(env, cache, B, T);  // [B, T, H, dv]
  o = output(o, env, B, T, false);  // [B, T, H * dv]
  return torch::linear(o, params_.at("o_proj").to(o.scalar_type()));
}

}  // namespace linac::model
