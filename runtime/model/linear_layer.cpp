#include "model/linear_layer.h"

#include "oracle/expr_eval.h"
#include "oracle/oracle.h"
#include "ops/profile_scope.h"
#include "ops/recurrence_ops.h"
#include "prologue/fused_recurrence.h"
#include "prologue/map_op.h"

#include <cmath>
#include <stdexcept>

namespace linac::model {

using ops::scope::profiled;
namespace scope = ops::scope;

Plan LinearMixerImpl::plan(const runtime::VariantKernels& kernels, int64_t hidden) {
  const runtime::LayerDescription& layer = kernels.layer;
  const MixerDims d = resolveDims(kernels, hidden);
  const ParamInit zeros = ParamInit::zeros(), ones = ParamInit::ones(), normal = ParamInit::normal();
  Plan p;
  for (const auto& in : layer.inputs) {
    const int64_t out = extentWidth(in.extent, d);
    // RWKV's mix coefficients live in [0, 1]; a uniform draw keeps gradients generic.
    if (in.tokenShift) p.push_back({"shift_" + in.name, {hidden}, ParamInit::uniform(0.0, 1.0)});
    if (in.lowRank > 0) {
      p.push_back({"down_" + in.name, {in.lowRank, hidden}, normal});
      p.push_back({"proj_" + in.name, {out, in.lowRank}, normal});
    } else {
      p.push_back({"proj_" + in.name, {out, hidden}, normal});
    }
    if (in.bias) p.push_back({"bias_" + in.name, {out}, zeros});
    if (in.conv > 0) p.push_back({"conv_" + in.name, {out, 1, in.conv}, normal});
  }
  for (const auto& par : layer.params) {
    std::vector<int64_t> shape = fieldShape(par.extent, 1, 1, d, par.name);  // [1, 1, H|1, x]
    p.push_back({"param_" + par.name, {shape[2], shape[3]}, ParamInit::fromParam(par)});
  }
  const int64_t width = d.heads * d.valueDim;
  switch (layer.norm) {
  case runtime::NormKind::None: break;
  case runtime::NormKind::RMSNorm:  // fla's g_norm: one weight over dv, shared by the heads
    p.push_back({"norm_weight", {d.valueDim}, ones});
    break;
  case runtime::NormKind::GroupNorm:  // fla's GroupNorm(H, H * dv): affine over all channels
  case runtime::NormKind::LayerNorm:
    p.push_back({"norm_weight", {width}, ones});
    p.push_back({"norm_bias", {width}, zeros});
    break;
  }
  p.push_back({"o_proj", {hidden, width}, normal});
  return p;
}

LinearMixerImpl::LinearMixerImpl(const runtime::VariantKernels& kernels, int64_t hidden, int64_t layer,
                                 int64_t numLayers, MixerBackend backend, const spec::VariantSpec* oracleSpec)
    : kernels_(&kernels), layer_(&kernels.layer), dims_(resolveDims(kernels, hidden)), layerIndex_(layer),
      numLayers_(numLayers), backend_(backend) {
  if (backend == MixerBackend::Oracle) {
    if (!oracleSpec)
      throw std::invalid_argument("model: the oracle backend of '" + kernels.name + "' needs its spec");
    if (oracleSpec->name != kernels.name)
      throw std::invalid_argument("model: the oracle spec '" + oracleSpec->name + "' is not variant '" +
                                  kernels.name + "'");
    oracleSpec_ = *oracleSpec;
  }
  for (const auto& in : layer_->inputs)
    if (in.extent == runtime::Extent::Hidden)
      throw std::invalid_argument("model: input '" + in.name + "' of '" + kernels.name +
                                  "' has extent hidden, which the linear layer does not support yet");
  registerPlan(*this, plan(kernels, hidden), params_);
}

torch::Tensor LinearMixerImpl::input(const runtime::InputDescription& in, const torch::Tensor& x,
                                     const Documents* documents) const {
  const int64_t B = x.size(0), T = x.size(1);
  torch::Tensor h = x;  // [B, T, hidden]
  if (in.tokenShift) {
    h = profiled(scope::kPrologueEpilogue, [&] {
      torch::Tensor prev = torch::constant_pad_nd(x, {0, 0, 1, 0}).narrow(1, 0, T);  // x_{t-1}, 0 at t = 0
      if (documents) prev = prev * (documents->positions > 0).unsqueeze(-1).to(prev.scalar_type());  // 0 at a document's start
      return x + params_.at("shift_" + in.name) * (prev - x);
    });
  }
  h = profiled(scope::kProjections, [&] {
    torch::Tensor r = in.lowRank > 0 ? torch::linear(h, params_.at("down_" + in.name)) : h;  // [B, T, rank]
    return torch::linear(r, params_.at("proj_" + in.name),
                         in.bias ? params_.at("bias_" + in.name) : torch::Tensor());  // [B, T, width]
  });
  // The convolution and its activation in one (one kernel on CUDA); without a convolution the
  // activation is one of the maps.
  if (in.conv > 0)
    h = profiled(scope::kShortConv, [&] {
      const torch::Tensor& w = params_.at("conv_" + in.name);
      return documents ? causalConvActivatedWithin(h, w, in.activation, documents->positions)
                       : causalConvActivated(h, w, in.activation);
    });
  return profiled(scope::kPrologueEpilogue, [&] {
    torch::Tensor f = (in.conv > 0 ? h : activate(h, in.activation))
                          .reshape(fieldShape(in.extent, B, T, dims_, in.name));  // [B, T, H|1, dk|dv|1]
    if (in.l2norm && !normalizedInKernel(in.name)) f = l2Normalize(f);
    if (in.rope) f = documents ? ropeAt(f, kInputRopeTheta, documents->positions) : rope(f, kInputRopeTheta);
    return f;
  });
}

bool LinearMixerImpl::normalizedInKernel(const std::string& input) const {
  const runtime::FusedPlan& plan = kernels_->fused;
  if (backend_ == MixerBackend::Oracle || !plan.available) return false;
  return (plan.normQ && input == plan.qTile) || (plan.normK && input == plan.kTile);
}

torch::Tensor LinearMixerImpl::kernelRole(const std::string& role, const runtime::RoleSource& source,
                                          const Env& env) const {
  const runtime::PrologueMap* map = kernels_->find(role);
  if (map) {
    // applyMap runs where the operands are, in float32: the generated device maps on CUDA (a
    // round trip through the CPU only for a variant without them, e.g. one compiled on demand).
    std::vector<torch::Tensor> operands;
    for (const auto& a : map->args) operands.push_back(env.at(a));
    const torch::Tensor& like = env.at("hidden");  // carries x's device and dtype
    return prologue::applyMap(*map, operands).to(like.device(), like.scalar_type());
  }
  if (!source.name.empty() && env.count(source.name)) return env.at(source.name);
  throw std::runtime_error("model: the generated code of '" + kernels_->name + "' has no '" + role +
                           "' prologue although its layer description computes one; regenerate generated/");
}

torch::Tensor LinearMixerImpl::role(const std::string& name, const runtime::RoleSource& source,
                                    const spec::ExprPtr& expr, const Env& env, bool oracle) const {
  if (!oracle) return kernelRole(name, source, env);
  if (!expr) throw std::runtime_error("model: the spec of '" + kernels_->name + "' has no '" + name + "'");
  return oracle::evalExpr(*expr, env, oracleSpec_->defs);
}

double LinearMixerImpl::scale() const {
  return layer_->scale ? *layer_->scale : 1.0 / std::sqrt(double(dims_.keyDim));
}

torch::Tensor LinearMixerImpl::norm(const torch::Tensor& o) const {
  auto param = [&](const char* name) { return params_.at(name).to(o.device(), o.scalar_type()); };
  const int64_t H = dims_.heads, dv = dims_.valueDim;
  switch (layer_->norm) {
  case runtime::NormKind::None: return o;
  case runtime::NormKind::RMSNorm:  // per head over dv; rmsNorm casts the weight to the dtype it computes in
    return rmsNorm(o, params_.at("norm_weight").to(o.device()));
  case runtime::NormKind::GroupNorm: {  // per-head layer norm, affine over all H * dv channels
    torch::Tensor mean = o.mean(-1, true), var = (o - mean).pow(2).mean(-1, true);
    torch::Tensor y = (o - mean) * torch::rsqrt(var + kNormEps);  // [B, T, H, dv]
    return y * param("norm_weight").view({H, dv}) + param("norm_bias").view({H, dv});
  }
  case runtime::NormKind::LayerNorm: {
    const auto sizes = o.sizes().vec();
    torch::Tensor flat = o.reshape({sizes[0], sizes[1], H * dv});
    torch::Tensor mean = flat.mean(-1, true), var = (flat - mean).pow(2).mean(-1, true);
    torch::Tensor y = (flat - mean) * torch::rsqrt(var + kNormEps) * param("norm_weight") + param("norm_bias");
    return y.view(sizes);
  }
  }
  throw std::invalid_argument("model: unknown output norm");
}

torch::Tensor LinearMixerImpl::mix(const Env& env, int64_t B, int64_t T, bool oracle,
                                   const torch::Tensor& cuSeqlens) const {
  const runtime::LayerDescription& l = *layer_;
  const spec::RecurrenceSpec* r = oracle ? &oracleSpec_->recurrence : nullptr;  // the oracle's expressions
  const MixerDims& d = dims_;
  // A role's prologue map, in the kernel's layout.
  auto get = [&](const std::string& name, const runtime::RoleSource& source, spec::ExprPtr spec::RecurrenceSpec::*expr) {
    return profiled(scope::kPrologueEpilogue, [&] {
      return toKernelLayout(name, role(name, source, r ? r->*expr : spec::ExprPtr(), env, oracle), B, T, d,
                            *kernels_);
    });
  };
  torch::Tensor o;  // [B, T, H, dv]
  if (!oracle && kernels_->fused.available) {
    // q, k, v, decay, beta and u from the raw operands: inside the chunk kernel on CUDA
    // (prologue/fused_recurrence.h), composed from the prologue maps elsewhere.
    prologue::FusedOptions opt;
    opt.keyDim = d.keyDim;
    opt.scale = scale();
    opt.chunk = kernels_->chunk;
    opt.cuSeqlens = cuSeqlens;
    o = prologue::fusedRecurrence(*kernels_, env, opt).first;
    return output(o, env, B, T, oracle);
  }
  const kernels::RecurrenceKind& kind = kernels_->kind;
  const bool decayed = kind.decay != kernels::DecayClass::None && l.decay.present;
  torch::Tensor g = decayed ? get("decay", l.decay, &spec::RecurrenceSpec::decay) : torch::Tensor();
  torch::Tensor v = get("v", l.v, &spec::RecurrenceSpec::v);
  // The oracle takes the packed sequences' offsets as a vector.
  std::vector<int64_t> offsets;
  if (oracle && cuSeqlens.defined()) {
    torch::Tensor host = cuSeqlens.to(torch::kCPU);
    offsets.assign(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
  }
  if (kernels_->vectorState) {
    // v, g [B, T, H * dv]
    o = profiled(scope::kMixerKernel, [&] {
      return oracle ? oracle::scan(v, g, {}, offsets).h : ops::scan(v, g, {}, cuSeqlens, false).first;
    }).view({B, T, d.heads, d.valueDim});
  } else {
    torch::Tensor q = get("q", l.q, &spec::RecurrenceSpec::q);  // [B, T, H, dk]
    torch::Tensor k = get("k", l.k, &spec::RecurrenceSpec::k);  // [B, T, H, dk]
    torch::Tensor beta = kind.update == kernels::UpdateRule::Delta
                             ? get("beta", l.beta, &spec::RecurrenceSpec::beta)
                             : torch::Tensor();  // [B, T, H]
    torch::Tensor u = kind.readout == kernels::Readout::ExclusiveBonus
                          ? toKernelLayout("u", env.at(l.bonus), B, T, d, *kernels_)
                          : torch::Tensor();  // [H, dk]
    o = profiled(scope::kMixerKernel, [&] {
      if (oracle) return oracle::recurrence(kind, {q, k, v, g, beta, u, {}, scale(), offsets}).o;
      toCommonKernelDtype(q, k, v);
      ops::RecurrenceOptions opt{kind, scale(), kernels_->chunk, false};
      return ops::recurrence({q, k, v, g, beta, u, {}, cuSeqlens}, opt).first;
    });
  }
  return output(o, env, B, T, oracle);
}

torch::Tensor LinearMixerImpl::output(torch::Tensor o, const Env& env, int64_t B, int64_t T,
                                      bool oracle) const {
  const spec::OutputSpec* out = oracle ? &oracleSpec_->output : nullptr;  // the oracle's expressions
  return profiled(scope::kPrologueEpilogue, [&] {
    torch::Tensor y = o;
    if (layer_->residual.present)
      y = y + role("residual", layer_->residual, out ? out->residual : spec::ExprPtr(), env, oracle);
    torch::Tensor gate = layer_->gate.present
                             ? role("gate", layer_->gate, out ? out->gate : spec::ExprPtr(), env, oracle)
                             : torch::Tensor();
    if (!oracle && gate.defined() && layer_->norm == runtime::NormKind::RMSNorm) {
      y = gatedRmsNorm(y, params_.at("norm_weight").to(y.device()), gate);  // one kernel on CUDA
    } else {
      y = norm(y);
      if (gate.defined()) y = y * gate;
    }
    return y.reshape({B, T, dims_.heads * dims_.valueDim});
  });
}

void LinearMixerImpl::addParamsAndStructure(Env& env, const torch::Tensor& x) const {
  const int64_t H = dims_.heads;
  for (const auto& p : layer_->params)
    env[p.name] = params_.at("param_" + p.name).to(x.scalar_type()).view(fieldShape(p.extent, 1, 1, dims_, p.name));
  auto scalar = [&](double value) { return torch::full({1, 1, 1, 1}, value, x.options()); };
  env["head"] = torch::arange(H, x.options()).view({1, 1, H, 1});
  env["layer"] = scalar(double(layerIndex_));
  env["num_layers"] = scalar(double(numLayers_));
  env["key_dim"] = scalar(double(dims_.keyDim));
  env["value_dim"] = scalar(double(dims_.valueDim));
  env["hidden"] = scalar(double(dims_.hidden));
}

torch::Tensor LinearMixerImpl::forward(const torch::Tensor& x, const Documents* documents) {
  const int64_t B = x.size(0), T = x.size(1);
  Env env;  // field layout (roles.h), x's dtype and device
  for (const auto& in : layer_->inputs) {
    env[in.name] = input(in, x, documents);
    // Packed documents: the rows as one sequence [1, B * T, ...] that cu_seqlens splits.
    if (documents) env[in.name] = packRows(env[in.name]);
  }
  profiled(scope::kPrologueEpilogue, [&] { addParamsAndStructure(env, x); });
  const int64_t mixB = documents ? 1 : B, mixT = documents ? B * T : T;
  const torch::Tensor cuSeqlens = documents ? documents->cuSeqlens : torch::Tensor();
  torch::Tensor o;  // [B, T, H * dv]
  if (backend_ == MixerBackend::Oracle) {
    // The oracle runs in float64 on the CPU: every value the mixer reads is converted (the
    // conversion is differentiable, so gradients flow back to the float32 parameters).
    Env env64;
    for (const auto& [name, t] : env) env64[name] = t.to(torch::kCPU, torch::kFloat64);
    o = mix(env64, mixB, mixT, true, cuSeqlens).to(x.device(), x.scalar_type());
  } else {
    o = mix(env, mixB, mixT, false, cuSeqlens);
  }
  o = o.reshape({B, T, -1});
  return profiled(scope::kProjections, [&] { return torch::linear(o, params_.at("o_proj").to(o.scalar_type())); });
}

}  // namespace linac::model
