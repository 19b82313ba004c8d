#include "trainer/grad_clip.h"

#include <cmath>

namespace linac::trainer {
namespace {
/// clip_grad_norm_'s guard against dividing by a zero norm.
constexpr double kClipEpsilon = 1e-6;
}  // namespace

torch::Tensor clipGradNorm(const std::vector<torch::Tensor>& params, double maxNorm) {
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined())
      grads.push_back(p.grad());
  if (grads.empty())
    return torch::zeros({}, params.empty() ? torch::TensorOptions() : params.front().options());
  // One multi-tensor pass for the per-gradient norms, then the norm of the norms (in fp32).
  const torch::Tensor total = torch::stack(torch::_foreach_norm(grads, 2)).to(torch::kFloat32).norm(2);  // []
  if (std::isfinite(maxNorm))
    torch::_foreach_mul_(grads, torch::clamp_max(maxNorm / (total + kClipEpsilon), 1.0));
  return total;
}

}  // namespace linac::trainer
