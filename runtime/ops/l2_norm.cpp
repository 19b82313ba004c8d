#include "ops/l2_norm.h"

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

constexpr std::string_view kOp = "linac::ops::l2Normalize";

#ifdef LINAC_HAVE_CUDA
namespace cuda = kernels::cuda;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cuda::L2NormShape shapeOf(const torch::Tensor& x, double eps) {
  cuda::L2NormShape shape;
  shape.dim = int(x.size(-1));
  shape.rows = shape.dim == 0 ? 0 : x.numel() / shape.dim;
  shape.eps = float(eps);
  return shape;
}

/// y = x r per row; saves x and r [rows] (fp32), from which the backward takes dx.
struct L2NormFunction : public torch::autograd::Function<L2NormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const cuda::L2NormShape shape = shapeOf(xc, eps);
    torch::Tensor y = torch::empty_like(xc);
    torch::Tensor r = torch::empty({shape.rows}, xc.options().dtype(torch::kFloat32));
    cuda::L2NormForwardArgs args;
    args.x = xc.data_ptr(), args.y = y.data_ptr(), args.r = r.data_ptr<float>();
    cuda::l2NormForward(checks::kernelDtype(xc.scalar_type()), shape, args, currentStream(xc.device()));
    ctx->save_for_backward({xc, r});
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& r = saved[1];
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor dy = gradOutputs[0].to(x.scalar_type()).contiguous();
    torch::Tensor dx = torch::empty_like(x);
    cuda::L2NormBackwardArgs args;
    args.x = x.data_ptr(), args.dy = dy.data_ptr(), args.r = r.data_ptr<float>(), args.dx = dx.data_ptr();
    cuda::l2NormBackward(checks::kernelDtype(x.scalar_type()), shapeOf(x, ctx->saved_data["eps"].toDouble()), args,
                         currentStream(x.device()));
    return {dx, torch::Tensor()};  // eps takes no gradient
  }
};
#endif

}  // namespace

bool l2NormalizeSupported([[maybe_unused]] const torch::Tensor& x) {
#ifdef LINAC_HAVE_CUDA
  if (!x.defined() || !x.is_cuda() || x.dim() == 0) return false;
  return checks::isKernelDtype(x.scalar_type()) && x.size(-1) <= std::numeric_limits<int>::max();
#else
  return false;
#endif
}

torch::Tensor l2Normalize(const torch::Tensor& x, double eps) {
  checks::expectDefined(kOp, "x", x);
  checks::expectKernelDtype(kOp, "x", x);
  if (!(eps > 0.0)) checks::fail(kOp, "eps", "a positive number", std::to_string(eps));
  if (!l2NormalizeSupported(x))
    checks::fail(kOp, "x", "a CUDA tensor of at least one dimension in a build with CUDA (the CPU composes torch ops)",
                 checks::describe(x));
#ifdef LINAC_HAVE_CUDA
  return L2NormFunction::apply(x, eps);
#else
  throw std::logic_error(std::string(kOp) + ": unreachable without CUDA");
#endif
}

}  // namespace linac::ops
