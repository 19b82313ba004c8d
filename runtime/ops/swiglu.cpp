#include "ops/swiglu.h"

#include "ops/checks.h"

#include <torch/autograd.h>

#include <stdexcept>
#include <string>

#ifdef LINAC_HAVE_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "kernels/cuda/cuda_kernels.h"
#include "ops/cuda_stream.h"
#endif

namespace linac::ops {
namespace {

constexpr std::string_view kOp = "linac::ops::swigluProduct";

#ifdef LINAC_HAVE_CUDA
namespace cuda = kernels::cuda;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// y = silu(g) * u; saves g and u, from which the backward recomputes silu(g) and its derivative.
struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& g, const torch::Tensor& u) {
    const c10::cuda::CUDAGuard guard(g.device());
    const torch::Tensor gc = g.contiguous(), uc = u.contiguous();
    torch::Tensor y = torch::empty_like(gc);
    cuda::SwigluForwardArgs args;
    args.g = gc.data_ptr(), args.u = uc.data_ptr(), args.y = y.data_ptr();
    cuda::swigluForward(checks::kernelDtype(gc.scalar_type()), gc.numel(), args, currentStream(gc.device()));
    ctx->save_for_backward({gc, uc});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& g = saved[0];
    const torch::Tensor& u = saved[1];
    const c10::cuda::CUDAGuard guard(g.device());
    const torch::Tensor dy = gradOutputs[0].to(g.scalar_type()).contiguous();
    torch::Tensor dg = torch::empty_like(g), du = torch::empty_like(u);
    cuda::SwigluBackwardArgs args;
    args.g = g.data_ptr(), args.u = u.data_ptr(), args.dy = dy.data_ptr();
    args.dg = dg.data_ptr(), args.du = du.data_ptr();
    cuda::swigluBackward(checks::kernelDtype(g.scalar_type()), g.numel(), args, currentStream(g.device()));
    return {dg, du};
  }
};
#endif

}  // namespace

bool swigluProductSupported([[maybe_unused]] const torch::Tensor& g, [[maybe_unused]] const torch::Tensor& u) {
#ifdef LINAC_HAVE_CUDA
  return g.defined() && u.defined() && g.is_cuda() && u.device() == g.device() &&
         u.scalar_type() == g.scalar_type() && checks::isKernelDtype(g.scalar_type()) && u.sizes() == g.sizes();
#else
  return false;
#endif
}

torch::Tensor swigluProduct(const torch::Tensor& g, const torch::Tensor& u) {
  checks::expectDefined(kOp, "g", g);
  checks::expectDefined(kOp, "u", u);
  checks::expectKernelDtype(kOp, "g", g);
  checks::expectDtype(kOp, "u", u, g.scalar_type());
  checks::expectShape(kOp, "u", u, g.sizes());
  checks::expectDevice(kOp, "u", u, g.device());
  if (!swigluProductSupported(g, u))
    checks::fail(kOp, "g", "a CUDA tensor in a build with CUDA (the CPU composes torch::silu(g) * u)",
                 checks::describe(g));
#ifdef LINAC_HAVE_CUDA
  return SwigluFunction::apply(g, u);
#else
  throw std::logic_error(std::string(kOp) + ": unreachable without CUDA");
#endif
}

}  // namespace linac::ops
