#include "model/layers.h"

#include "ops/l2_norm.h"
#include "ops/rms_norm.h"
#include "ops/short_conv.h"
#include "ops/swiglu.h"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace linac::model {

int64_t planCount(const Plan& plan) {
  int64_t n = 0;
  for (const auto& p : plan) {
    int64_t e = 1;
    for (int64_t d : p.shape) e *= d;
    n += e;
  }
  return n;
}

namespace {

/// A layer parameter's initial values (specs/README.md, params.init).
torch::Tensor paramInit(const runtime::ParamDescription& init, const std::vector<int64_t>& shape) {
  auto uniform = [&](double a, double b) { return a + (b - a) * torch::rand(shape); };
  switch (init.init) {
  case runtime::InitKind::Zeros: return torch::zeros(shape);
  case runtime::InitKind::Ones: return torch::ones(shape);
  case runtime::InitKind::Constant: return torch::full(shape, init.a);
  case runtime::InitKind::Normal: return init.a * torch::randn(shape);
  case runtime::InitKind::Uniform: return uniform(init.a, init.b);
  case runtime::InitKind::LogUniform: return torch::log(uniform(init.a, init.b));
  case runtime::InitKind::DtBias: {
    // Mamba: dt log-uniform in [a, b], stored as its inverse softplus so softplus(dt_bias) = dt.
    torch::Tensor dt = torch::exp(uniform(std::log(init.a), std::log(init.b)));
    return dt + torch::log(-torch::expm1(-dt));
  }
  }
  throw std::invalid_argument("model: unknown parameter init");
}

}  // namespace

torch::Tensor initTensor(const ParamInit& init, const std::vector<int64_t>& shape) {
  switch (init.kind) {
  case ParamInit::Kind::Normal: return init.a * torch::randn(shape);
  case ParamInit::Kind::Zeros: return torch::zeros(shape);
  case ParamInit::Kind::Ones: return torch::ones(shape);
  case ParamInit::Kind::Uniform: return init.a + (init.b - init.a) * torch::rand(shape);
  case ParamInit::Kind::Param: return paramInit(init.param, shape);
  }
  throw std::invalid_argument("model: unknown parameter init");
}

void registerPlan(torch::nn::Module& module, const Plan& plan,
                  std::map<std::string, torch::Tensor>& out) {
  for (const auto& p : plan) out[p.name] = module.register_parameter(p.name, initTensor(p.init, p.shape));
}

int64_t intermediateSize(const spec::PresetSpec& preset) {
  if (preset.intermediate > 0) return preset.intermediate;
  const auto i = static_cast<int64_t>(preset.hidden * 4 * 2 / 3.0);  // fla: int(hidden * 4 * 2 / 3)
  return 256 * ((i + 255) / 256);
}

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  // x * rsqrt(mean(x^2) + eps) * weight. Under autocast a bf16 / fp16 input is normalised in fp32
  // and comes out fp32 (as the composed formula did, pow and rsqrt being on autocast's fp32 list);
  // at::rms_norm is on no autocast list and returns its input's dtype, so the input is upcast
  // here. Outside autocast a reduced-precision input stays in its dtype (at::rms_norm accumulates
  // in fp32 either way). The weight is cast to the input's dtype.
  const bool upcast = at::isReducedFloatingType(x.scalar_type()) && at::autocast::is_autocast_enabled(x.device().type());
  const torch::Tensor in = upcast ? x.to(torch::kFloat) : x;
  return at::rms_norm(in, {in.size(-1)}, weight.to(in.scalar_type()), eps);
}

torch::Tensor autocastInput(const torch::Tensor& x) {
  const c10::DeviceType device = x.device().type();
  if (x.scalar_type() != torch::kFloat || !at::autocast::is_autocast_enabled(device)) return x;
  return x.to(at::autocast::get_autocast_dtype(device));
}

namespace {

/// The dtype a block's projections read its normalised input in: autocast's where it is on, else x's.
torch::ScalarType projectionDtype(const torch::Tensor& x) {
  const c10::DeviceType device = x.device().type();
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : x.scalar_type();
}

/// The fused norm kernels (ops::rmsNorm / addRmsNorm / rmsNormGated) on CUDA, unless
/// LINAC_FUSED_NORMS=0 asks for the composed ATen path (A/B runs). Read at each call (cheap).
bool fusedNorms() {
  const char* env = std::getenv("LINAC_FUSED_NORMS");
  return env == nullptr || std::string(env) != "0";
}

}  // namespace

torch::Tensor blockNorm(const torch::Tensor& x, const torch::Tensor& weight) {
  const torch::ScalarType out = projectionDtype(x);
  if (fusedNorms() && ops::rmsNormSupported(x, torch::Tensor(), weight, out)) return ops::rmsNorm(x, weight, kNormEps, out);
  return autocastInput(rmsNorm(x, weight));
}

torch::Tensor gatedRmsNorm(const torch::Tensor& o, const torch::Tensor& weight, const torch::Tensor& gate) {
  const torch::ScalarType out = projectionDtype(o);
  if (fusedNorms() && ops::rmsNormGatedSupported(o, gate, weight, out)) return ops::rmsNormGated(o, weight, gate, kNormEps, out);
  return rmsNorm(o, weight) * gate;
}

std::pair<torch::Tensor, torch::Tensor> addBlockNorm(const torch::Tensor& x, const torch::Tensor& residual,
                                                     const torch::Tensor& weight) {
  const torch::ScalarType out = projectionDtype(x);
  if (fusedNorms() && ops::rmsNormSupported(x, residual, weight, out)) return ops::addRmsNorm(x, residual, weight, kNormEps, out);
  torch::Tensor h = x + residual;
  return {h, blockNorm(h, weight)};
}

torch::Tensor rope(const torch::Tensor& x, double theta, int64_t offset) {
  const int64_t T = x.size(1);
  return ropeAt(x, theta, torch::arange(offset, offset + T, x.options().dtype(torch::kInt64)).view({1, T}));
}

torch::Tensor ropeAt(const torch::Tensor& x, double theta, const torch::Tensor& positions) {
  const int64_t T = x.size(1), D = x.size(-1);
  if (D % 2) throw std::invalid_argument("rope: head dim " + std::to_string(D) + " is odd");
  auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(x.device());
  torch::Tensor invFreq = torch::pow(theta, -torch::arange(0, D, 2, opts) / double(D));  // [D/2]
  torch::Tensor freqs = positions.to(opts).unsqueeze(-1) * invFreq;                        // [B|1, T, D/2]
  const int64_t rows = positions.size(0);
  torch::Tensor cos = freqs.cos().to(x.scalar_type()).view({rows, T, 1, D / 2});
  torch::Tensor sin = freqs.sin().to(x.scalar_type()).view({rows, T, 1, D / 2});
  torch::Tensor x1 = x.narrow(-1, 0, D / 2), x2 = x.narrow(-1, D / 2, D / 2);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

void toCommonKernelDtype(torch::Tensor& q, torch::Tensor& k, torch::Tensor& v) {
  for (const torch::Tensor* t : {&v, &q, &k}) {
    const auto dtype = t->scalar_type();
    if (dtype == torch::kBFloat16 || dtype == torch::kHalf) {
      q = q.to(dtype), k = k.to(dtype), v = v.to(dtype);
      return;
    }
  }
}

torch::Tensor l2Normalize(const torch::Tensor& x, double eps) {
  if (ops::l2NormalizeSupported(x)) return ops::l2Normalize(x, eps);  // one kernel each way on CUDA
  return x * torch::rsqrt(x.pow(2).sum(-1, true) + eps);
}

torch::Tensor causalConv(const torch::Tensor& x, const torch::Tensor& weight) {
  const int64_t T = x.size(1), C = x.size(2), W = weight.size(-1);
  // [B, C, T] padded by W - 1 on both sides; the first T outputs are the causal ones.
  torch::Tensor y = torch::conv1d(x.transpose(1, 2), weight, {}, /*stride=*/{1}, /*padding=*/{W - 1},
                                  /*dilation=*/{1}, /*groups=*/C);  // [B, C, T + W - 1]
  return y.narrow(2, 0, T).transpose(1, 2);                        // [B, T, C]
}

torch::Tensor activate(const torch::Tensor& x, runtime::Activation a) {
  switch (a) {
  case runtime::Activation::None: return x;
  case runtime::Activation::Silu: return torch::silu(x);
  case runtime::Activation::Sigmoid: return torch::sigmoid(x);
  case runtime::Activation::Relu: return torch::relu(x);
  case runtime::Activation::Tanh: return torch::tanh(x);
  case runtime::Activation::Elu1: return torch::elu(x) + 1.0;
  }
  throw std::invalid_argument("model: unknown activation");
}

torch::Tensor causalConvActivated(const torch::Tensor& x, const torch::Tensor& weight, runtime::Activation a) {
  if (ops::shortConvSupported(x, weight)) return ops::shortConv(x, weight, a);
  return activate(causalConv(x, weight), a);
}

torch::Tensor causalConvActivatedWithin(const torch::Tensor& x, const torch::Tensor& weight, runtime::Activation a,
                                        const torch::Tensor& positions) {
  if (ops::shortConvSupported(x, weight)) return ops::shortConv(x, weight, a, positions);
  const int64_t T = x.size(1), W = weight.size(-1);
  torch::Tensor x32 = x.to(torch::kFloat32), w32 = weight.to(x.device(), torch::kFloat32);  // [B, T, C], [C, 1, W]
  // out_t = sum_j w[:, W - 1 - j] x_{t-j}, the terms with j > positions_t dropped.
  torch::Tensor y = x32 * w32.select(1, 0).select(1, W - 1);
  for (int64_t j = 1; j < W && j < T; ++j) {
    torch::Tensor earlier = torch::constant_pad_nd(x32, {0, 0, j, 0}).narrow(1, 0, T);  // x_{t-j}, 0 before the row
    torch::Tensor inside = (positions >= j).unsqueeze(-1).to(torch::kFloat32);      // [B, T, 1]
    y = y + earlier * inside * w32.select(1, 0).select(1, W - 1 - j);
  }
  return activate(y, a).to(x.scalar_type());
}

Plan swigluPlan(int64_t hidden, int64_t intermediate, const std::string& prefix) {
  return {{prefix + "_gate", {intermediate, hidden}, ParamInit::normal()},
          {prefix + "_up", {intermediate, hidden}, ParamInit::normal()},
          {prefix + "_down", {hidden, intermediate}, ParamInit::normal()}};
}

torch::Tensor swiglu(const torch::Tensor& x, const std::map<std::string, torch::Tensor>& params,
                     const std::string& prefix) {
  torch::Tensor gate = torch::linear(x, params.at(prefix + "_gate"));  // [B, T, I]
  torch::Tensor up = torch::linear(x, params.at(prefix + "_up"));      // [B, T, I]
  // silu(gate) * up: one kernel on CUDA (computed in fp32, rounded once), composed elsewhere.
  torch::Tensor product = ops::swigluProductSupported(gate, up) ? ops::swigluProduct(gate, up) : torch::silu(gate) * up;
  return torch::linear(product, params.at(prefix + "_down"));
}

}  // namespace linac::model
