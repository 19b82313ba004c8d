#include "trainer/fused_adamw.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_fused_adamw.h>

#include <map>
#include <tuple>

namespace linac::trainer {
namespace {

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

bool fusableDtype(torch::ScalarType t) {
  return t == torch::kFloat32 || t == torch::kBFloat16 || t == torch::kFloat16;
}

// The parameters of one kernel call: the same device, dtype and step count (the kernel reads one
// step count per tensor; a parameter that had no gradient at some step lags the others).
struct Bucket {
  std::vector<torch::Tensor> params, grads, expAvgs, expAvgSqs;
};

}  // namespace

FusedAdamW::FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, AdamWOptions defaults)
    : torch::optim::AdamW(groups, std::move(defaults)) {}

bool FusedAdamW::fusedKernelFor(const torch::Device& device) {
  auto registered = [](c10::DispatchKey key) {
    const auto op = c10::Dispatcher::singleton().findSchema({"aten::_fused_adamw_", ""});
    return op && op->hasKernelForDispatchKey(key);
  };
  static const bool cpu = registered(c10::DispatchKey::CPU), cuda = registered(c10::DispatchKey::CUDA);
  return device.is_cpu() ? cpu : device.is_cuda() ? cuda : false;
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  fusedStep({});
  return loss;
}

void FusedAdamW::stepUnless(const torch::Tensor& skip) { fusedStep(skip); }

void FusedAdamW::fusedStep(const torch::Tensor& skip) {
  torch::NoGradGuard noGrad;
  // Everything fusable, or torch::optim::AdamW's own step for the whole optimizer (one path per
  // step, so the update rule never mixes within a run).
  bool fusable = true;
  for (const auto& group : param_groups())
    for (const auto& p : group.params())
      fusable = fusable && (!p.grad().defined() || (fusedKernelFor(p.device()) && fusableDtype(p.scalar_type()) &&
                                                    !p.grad().is_sparse() &&
                                                    !static_cast<const AdamWOptions&>(group.options()).amsgrad()));
  if (!fusable) {
    if (!skip.defined() || skip.item<float>() == 0)
      torch::optim::AdamW::step();
    return;
  }
  for (auto& group : param_groups()) {
    const auto& options = static_cast<const AdamWOptions&>(group.options());
    std::map<std::tuple<std::string, torch::ScalarType, int64_t>, Bucket> buckets;  // by device, dtype, step
    for (auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      auto& slot = state()[p.unsafeGetTensorImpl()];
      if (!slot) {  // as torch::optim::AdamW initialises a parameter's state
        auto fresh = std::make_unique<AdamWParamState>();
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<AdamWParamState&>(*slot);
      s.step(s.step() + 1);  // the kernel reads the count of the step it takes
      Bucket& b = buckets[{p.device().str(), p.scalar_type(), s.step()}];
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.expAvgs.push_back(s.exp_avg());
      b.expAvgSqs.push_back(s.exp_avg_sq());
    }
    for (auto& [key, b] : buckets) {
      // One fp32 count tensor shared by the bucket: the kernel only reads it.
      const torch::Tensor count = torch::full({}, static_cast<double>(std::get<2>(key)),
                                              b.params.front().options().dtype(torch::kFloat32));
      const std::vector<torch::Tensor> counts(b.params.size(), count);
      at::_fused_adamw_(b.params, b.grads, b.expAvgs, b.expAvgSqs, /*max_exp_avg_sqs=*/{}, counts, options.lr(),
                        std::get<0>(options.betas()), std::get<1>(options.betas()), options.weight_decay(),
                        options.eps(), /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt,
                        skip.defined() ? std::optional<torch::Tensor>(skip) : std::nullopt);
    }
  }
}

}  // namespace linac::trainer
