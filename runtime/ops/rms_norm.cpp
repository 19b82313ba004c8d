#include "ops/rms_norm.h"

#include "ops/checks.h"

#include <torch/autograd.h>

#include <limits>
#include <stdexcept>
#include <string>

#ifdef LINAC_HAVE_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "kernels/cuda/cuda_kernels.h"
#include "ops/cuda_stream.h"
#endif

namespace linac::ops {
namespace {

constexpr std::string_view kOp = "linac::ops::rmsNorm";

#ifdef LINAC_HAVE_CUDA
namespace cuda = kernels::cuda;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cuda::RmsNormTypes typesOf(torch::ScalarType x, torch::ScalarType residual, torch::ScalarType y) {
  return {checks::kernelDtype(x), checks::kernelDtype(residual), checks::kernelDtype(y)};
}

cuda::RmsNormShape shapeOf(const torch::Tensor& x, double eps) {
  cuda::RmsNormShape shape;
  shape.dim = int(x.size(-1));
  shape.rows = x.numel() / x.size(-1);
  shape.eps = float(eps);
  return shape;
}

/// y = rmsNorm(h) * w (* gate) with h = x (+ residual): outputs {y} or {y, h}; saves h (or x), w,
/// the per-row rstd and the gate. An absent residual or gate is passed as absent() with its flag
/// false: autograd records every tensor argument's device, so none may be undefined.
struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& residual,
                               const torch::Tensor& gate, const torch::Tensor& weight, double eps, int64_t out,
                               bool add, bool gated) {
    const c10::cuda::CUDAGuard guard(x.device());
    const auto outType = static_cast<torch::ScalarType>(out);
    const torch::Tensor xc = x.contiguous(), wc = weight.contiguous();
    const torch::Tensor rc = add ? residual.contiguous() : torch::Tensor();
    const torch::Tensor gc = gated ? gate.to(outType).contiguous() : torch::Tensor();
    const cuda::RmsNormShape shape = shapeOf(xc, eps);
    torch::Tensor y = torch::empty(xc.sizes(), xc.options().dtype(outType));
    torch::Tensor h = add ? torch::empty_like(xc) : torch::Tensor();
    torch::Tensor rstd = torch::empty({shape.rows}, xc.options().dtype(torch::kFloat32));
    cuda::RmsNormForwardArgs args;
    args.x = xc.data_ptr(), args.residual = add ? rc.data_ptr() : nullptr, args.weight = wc.data_ptr<float>();
    args.y = y.data_ptr(), args.h = add ? h.data_ptr() : nullptr, args.rstd = rstd.data_ptr<float>();
    args.gate = gated ? gc.data_ptr() : nullptr;
    const cuda::RmsNormTypes types = typesOf(xc.scalar_type(), add ? rc.scalar_type() : outType, outType);
    cuda::rmsNormForward(types, shape, args, currentStream(xc.device()));
    ctx->save_for_backward({add ? h : xc, wc, rstd, gc});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["out"] = out;
    ctx->saved_data["residual_type"] = static_cast<int64_t>(add ? rc.scalar_type() : outType);
    ctx->saved_data["add"] = add;
    ctx->set_materialize_grads(false);
    if (add) return {y, h};
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& h = saved[0];
    const torch::Tensor& w = saved[1];
    const torch::Tensor& rstd = saved[2];
    const torch::Tensor& gate = saved[3];  // undefined without a gate
    const bool add = ctx->saved_data["add"].toBool();
    const auto residualType = static_cast<torch::ScalarType>(ctx->saved_data["residual_type"].toInt());
    const auto yType = static_cast<torch::ScalarType>(ctx->saved_data["out"].toInt());
    const c10::cuda::CUDAGuard guard(h.device());
    const cuda::RmsNormShape shape = shapeOf(h, ctx->saved_data["eps"].toDouble());
    // y's gradient (zeros when y took none) in y's dtype; h's other gradient in h's, when given
    const torch::Tensor dy = grads[0].defined() ? grads[0].to(yType).contiguous()
                                                : torch::zeros(h.sizes(), h.options().dtype(yType));
    const torch::Tensor dhOut = add && grads.size() > 1 && grads[1].defined()
                                    ? grads[1].to(h.scalar_type()).contiguous()
                                    : torch::Tensor();
    const bool wantX = ctx->needs_input_grad(0), wantR = add && ctx->needs_input_grad(1);
    const bool wantGate = gate.defined() && ctx->needs_input_grad(2), wantW = ctx->needs_input_grad(3);
    torch::Tensor dx = torch::empty_like(h);  // written always: dresidual's values come with it
    torch::Tensor dr = wantR ? torch::empty(h.sizes(), h.options().dtype(residualType)) : torch::Tensor();
    torch::Tensor dw = wantW ? torch::empty_like(w) : torch::Tensor();
    torch::Tensor dgate = wantGate ? torch::empty_like(gate) : torch::Tensor();
    torch::Tensor workspace =
        wantW ? torch::empty({int64_t(cuda::rmsNormWorkspaceFloats(shape))}, w.options()) : torch::Tensor();
    cuda::RmsNormBackwardArgs args;
    args.dy = dy.data_ptr(), args.h = h.data_ptr(), args.weight = w.data_ptr<float>();
    args.rstd = rstd.data_ptr<float>(), args.dhOut = dhOut.defined() ? dhOut.data_ptr() : nullptr;
    args.dx = dx.data_ptr(), args.dresidual = wantR ? dr.data_ptr() : nullptr;
    args.dweight = wantW ? dw.data_ptr<float>() : nullptr;
    args.workspace = wantW ? workspace.data_ptr<float>() : nullptr;
    args.gate = gate.defined() ? gate.data_ptr() : nullptr;
    args.dgate = wantGate ? dgate.data_ptr() : nullptr;
    cuda::rmsNormBackward(typesOf(h.scalar_type(), residualType, yType), shape, args, currentStream(h.device()));
    // x, residual, gate, weight, then eps, out and the two flags (no gradient)
    return {wantX ? dx : torch::Tensor(), dr, dgate, dw, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

/// The stand-in for an absent residual or gate: a defined, empty tensor on x's device.
torch::Tensor absent(const torch::Tensor& x) { return torch::empty({0}, x.options()); }
#endif

void check(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
           torch::ScalarType out, double eps) {
  checks::expectDefined(kOp, "x", x);
  checks::expectDefined(kOp, "weight", weight);
  checks::expectKernelDtype(kOp, "x", x);
  if (!(eps > 0.0)) checks::fail(kOp, "eps", "a positive number", std::to_string(eps));
  if (!rmsNormSupported(x, residual, weight, out))
    checks::fail(kOp, "x",
                 "CUDA tensors in a build with CUDA, weight [D] fp32, residual of x's shape, and element types "
                 "the kernels have (see rmsNormSupported; the CPU composes ATen's rms_norm)",
                 checks::describe(x) + ", residual " + (residual.defined() ? checks::describe(residual) : "none") +
                     ", weight " + checks::describe(weight) + ", out " + std::string(c10::toString(out)));
}

}  // namespace

bool rmsNormSupported([[maybe_unused]] const torch::Tensor& x, [[maybe_unused]] const torch::Tensor& residual,
                      [[maybe_unused]] const torch::Tensor& weight, [[maybe_unused]] torch::ScalarType out) {
#ifdef LINAC_HAVE_CUDA
  if (!x.defined() || !weight.defined() || !x.is_cuda() || x.dim() == 0 || x.size(-1) == 0) return false;
  if (x.size(-1) > std::numeric_limits<int>::max() || weight.device() != x.device() ||
      weight.scalar_type() != torch::kFloat32 || weight.dim() != 1 || weight.size(0) != x.size(-1))
    return false;
  if (residual.defined() && (residual.device() != x.device() || residual.sizes() != x.sizes())) return false;
  const auto tx = x.scalar_type(), tr = residual.defined() ? residual.scalar_type() : out;
  if (!checks::isKernelDtype(tx) || !checks::isKernelDtype(tr) || !checks::isKernelDtype(out)) return false;
  return kernels::cuda::rmsNormSupported({checks::kernelDtype(tx), checks::kernelDtype(tr), checks::kernelDtype(out)});
#else
  return false;
#endif
}

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, torch::ScalarType out) {
  check(x, torch::Tensor(), weight, out, eps);
#ifdef LINAC_HAVE_CUDA
  return RmsNormFunction::apply(x, absent(x), absent(x), weight, eps, static_cast<int64_t>(out), false, false)[0];
#else
  throw std::logic_error(std::string(kOp) + ": unreachable without CUDA");
#endif
}

std::pair<torch::Tensor, torch::Tensor> addRmsNorm(const torch::Tensor& x, const torch::Tensor& residual,
                                                   const torch::Tensor& weight, double eps, torch::ScalarType out) {
  checks::expectDefined(kOp, "residual", residual);
  check(x, residual, weight, out, eps);
#ifdef LINAC_HAVE_CUDA
  const auto outputs =
      RmsNormFunction::apply(x, residual, absent(x), weight, eps, static_cast<int64_t>(out), true, false);
  return {outputs[1], outputs[0]};
#else
  throw std::logic_error(std::string(kOp) + ": unreachable without CUDA");
#endif
}

bool rmsNormGatedSupported(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& weight,
                           torch::ScalarType out) {
  return gate.defined() && gate.device() == x.device() && gate.sizes() == x.sizes() &&
         checks::isKernelDtype(gate.scalar_type()) && rmsNormSupported(x, torch::Tensor(), weight, out);
}

torch::Tensor rmsNormGated(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& gate, double eps,
                           torch::ScalarType out) {
  checks::expectDefined(kOp, "gate", gate);
  check(x, torch::Tensor(), weight, out, eps);
  if (!rmsNormGatedSupported(x, gate, weight, out))
    checks::fail(kOp, "gate", "x's shape and device and an fp32 / bf16 / fp16 dtype", checks::describe(gate));
#ifdef LINAC_HAVE_CUDA
  return RmsNormFunction::apply(x, absent(x), gate, weight, eps, static_cast<int64_t>(out), false, true)[0];
#else
  throw std::logic_error(std::string(kOp) + ": unreachable without CUDA");
#endif
}

}  // namespace linac::ops
