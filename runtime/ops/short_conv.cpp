#include "ops/short_conv.h"

#include "ops/checks.h"

#include <torch/autograd.h>

#include <optional>
#include <stdexcept>
#include <string>

#ifdef LINAC_HAVE_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "kernels/cuda/cuda_kernels.h"
#include "ops/cuda_stream.h"
#endif

namespace linac::ops {
namespace {

constexpr std::string_view kOp = "linac::ops::shortConv";

#ifdef LINAC_HAVE_CUDA
namespace cuda = kernels::cuda;
static_assert(kShortConvMaxWidth == cuda::kShortConvMaxWidth, "the op's width limit is the kernel's");
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cuda::ShortConvActivation kernelActivation(runtime::Activation a) {
  switch (a) {
  case runtime::Activation::None: return cuda::ShortConvActivation::None;
  case runtime::Activation::Silu: return cuda::ShortConvActivation::Silu;
  case runtime::Activation::Sigmoid: return cuda::ShortConvActivation::Sigmoid;
  case runtime::Activation::Relu: return cuda::ShortConvActivation::Relu;
  case runtime::Activation::Tanh: return cuda::ShortConvActivation::Tanh;
  case runtime::Activation::Elu1: return cuda::ShortConvActivation::Elu1;
  }
  throw std::invalid_argument(std::string(kOp) + ": unknown activation");
}

cuda::ShortConvShape kernelShape(const torch::Tensor& x, const torch::Tensor& weight) {
  return {x.size(0), x.size(1), x.size(2), static_cast<int>(weight.size(-1))};
}

/// y = act(conv(x, weight)); saves x, the fp32 weight [C, W] and the positions (packed
/// documents, or undefined), and recomputes the pre-activation from them in backward. Absent
/// positions arrive as nullopt: autograd records every tensor argument's device, so none may be
/// undefined.
struct ShortConvFunction : public torch::autograd::Function<ShortConvFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               int64_t activation, const std::optional<torch::Tensor>& positions) {
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();                                                  // [B, T, C]
    const torch::Tensor w32 = weight.reshape({weight.size(0), weight.size(-1)}).to(torch::kFloat32).contiguous();  // [C, W]
    torch::Tensor y = torch::empty_like(xc);                                                  // [B, T, C]
    cuda::ShortConvForwardArgs args;
    args.x = xc.data_ptr(), args.weight = w32.data_ptr<float>(), args.y = y.data_ptr();
    const torch::Tensor pc = positions ? positions->contiguous() : torch::Tensor();  // [B, T] int64
    if (pc.defined()) args.positions = pc.data_ptr<int64_t>();
    cuda::shortConvForward(checks::kernelDtype(xc.scalar_type()), static_cast<cuda::ShortConvActivation>(activation),
                           kernelShape(xc, w32), args, currentStream(xc.device()));
    ctx->save_for_backward({xc, w32, pc});
    ctx->saved_data["activation"] = activation;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];   // [B, T, C]
    const torch::Tensor& w32 = saved[1]; // [C, W]
    const torch::Tensor& positions = saved[2];  // [B, T] int64, or undefined
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor dy = gradOutputs[0].to(x.scalar_type()).contiguous();  // [B, T, C]
    const bool wantX = ctx->needs_input_grad(0), wantWeight = ctx->needs_input_grad(1);
    const cuda::ShortConvShape shape = kernelShape(x, w32);
    torch::Tensor dx, dw32, workspace;
    cuda::ShortConvBackwardArgs args;
    args.x = x.data_ptr(), args.weight = w32.data_ptr<float>(), args.dy = dy.data_ptr();
    if (positions.defined()) args.positions = positions.data_ptr<int64_t>();
    if (wantX) {
      dx = torch::empty_like(x);  // [B, T, C]
      args.dx = dx.data_ptr();
    }
    if (wantWeight) {
      dw32 = torch::empty_like(w32);  // [C, W]
      workspace = torch::empty({static_cast<int64_t>(cuda::shortConvWorkspaceFloats(shape))}, w32.options());
      args.dweight = dw32.data_ptr<float>(), args.workspace = workspace.data_ptr<float>();
    }
    cuda::shortConvBackward(checks::kernelDtype(x.scalar_type()),
                            static_cast<cuda::ShortConvActivation>(ctx->saved_data["activation"].toInt()), shape, args,
                            currentStream(x.device()));
    torch::Tensor dweight;  // [C, 1, W] in the weight's dtype
    if (wantWeight)
      dweight = dw32.view({shape.channels, 1, shape.width})
                    .to(static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt()));
    return {dx, dweight, torch::Tensor(), torch::Tensor()};
  }
};
#endif

}  // namespace

bool shortConvSupported([[maybe_unused]] const torch::Tensor& x, [[maybe_unused]] const torch::Tensor& weight) {
#ifdef LINAC_HAVE_CUDA
  if (!x.defined() || !weight.defined() || !x.is_cuda() || weight.device() != x.device()) return false;
  return checks::isKernelDtype(x.scalar_type()) && x.dim() == 3 && torch::isFloatingType(weight.scalar_type()) && weight.dim() == 3 &&
         weight.size(0) == x.size(2) && weight.size(1) == 1 && weight.size(2) >= 1 &&
         weight.size(2) <= kShortConvMaxWidth;
#else
  return false;
#endif
}

torch::Tensor shortConv(const torch::Tensor& x, const torch::Tensor& weight, runtime::Activation activation,
                        const torch::Tensor& positions) {
  checks::expectDefined(kOp, "x", x);
  checks::expectDefined(kOp, "weight", weight);
  checks::expectDim(kOp, "x", x, 3);
  checks::expectKernelDtype(kOp, "x", x);
  checks::expectFloating(kOp, "weight", weight);
  checks::expectDevice(kOp, "weight", weight, x.device());
  const int64_t C = x.size(2);
  if (weight.dim() != 3 || weight.size(0) != C || weight.size(1) != 1 || weight.size(2) < 1 ||
      weight.size(2) > kShortConvMaxWidth)
    checks::fail(kOp, "weight", "[" + std::to_string(C) + ", 1, W] with 1 <= W <= " + std::to_string(kShortConvMaxWidth),
                 checks::describe(weight));
  if (!shortConvSupported(x, weight))
    checks::fail(kOp, "x", "a CUDA tensor in a build with CUDA (the CPU composes torch::conv1d)", checks::describe(x));
  if (positions.defined() &&
      (positions.scalar_type() != torch::kInt64 || positions.dim() != 2 || positions.size(0) != x.size(0) ||
       positions.size(1) != x.size(1) || positions.device() != x.device()))
    checks::fail(kOp, "positions",
                 "int64 [" + std::to_string(x.size(0)) + ", " + std::to_string(x.size(1)) + "] on x's device",
                 checks::describe(positions));
#ifdef LINAC_HAVE_CUDA
  return ShortConvFunction::apply(x, weight, static_cast<int64_t>(kernelActivation(activation)),
                                  positions.defined() ? std::optional<torch::Tensor>(positions) : std::nullopt);
#else
  (void)activation;
  throw std::logic_error(std::string(kOp) + ": unreachable without CUDA");
#endif
}

}  // namespace linac::ops
