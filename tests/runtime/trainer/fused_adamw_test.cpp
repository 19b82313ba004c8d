// trainer::FusedAdamW (ATen's _fused_adamw_ over torch::optim::AdamW's state) against
// torch::optim::AdamW step for step on the CPU: parameters, moments and step counts, with two
// groups (weight decay and none), a learning rate changed between steps, and a parameter without
// a gradient at some steps; its state saved and loaded by torch::optim::AdamW and back; a step
// skipped on the device; the fallback (float64 parameters, which the fused path does not take)
// equal to torch::optim::AdamW bit for bit.
#include "trainer/fused_adamw.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace linac::trainer;
using torch::optim::AdamW;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

namespace {

constexpr int64_t kSteps = 12;
constexpr double kWeightDecay = 0.1;

// Three parameters: two matrices (decayed) and a vector (not), fresh leaves of the same values.
std::vector<torch::Tensor> makeParams(torch::ScalarType dtype) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> params;
  for (auto shape : {std::vector<int64_t>{17, 9}, std::vector<int64_t>{5, 31}, std::vector<int64_t>{23}})
    params.push_back(torch::randn(shape).to(dtype).requires_grad_(true));
  return params;
}

template <typename Optimizer>
std::unique_ptr<Optimizer> makeOptimizer(const std::vector<torch::Tensor>& params) {
  auto options = [](double wd) { return AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd); };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{params[0], params[1]},
                      std::make_unique<AdamWOptions>(options(kWeightDecay)));
  groups.emplace_back(std::vector<torch::Tensor>{params[2]}, std::make_unique<AdamWOptions>(options(0.0)));
  return std::make_unique<Optimizer>(std::move(groups), options(kWeightDecay));
}

// Step `step`'s gradients (the same for both optimizers); the vector has none at every third step.
void setGradients(const std::vector<torch::Tensor>& params, int64_t step) {
  torch::manual_seed(100 + step);
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor g = torch::randn(params[i].sizes()).to(params[i].scalar_type());
    params[i].mutable_grad() = (i == 2 && step % 3 == 0) ? torch::Tensor() : g;
  }
}

void setLr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) static_cast<AdamWOptions&>(group.options()).lr(lr);
}

double maxRelativeDifference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

const AdamWParamState& stateOf(torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  return static_cast<const AdamWParamState&>(*optimizer.state().at(p.unsafeGetTensorImpl()));
}

}  // namespace

TEST(FusedAdamW, HasCpuKernel) { EXPECT_TRUE(FusedAdamW::fusedKernelFor(torch::kCPU)); }

TEST(FusedAdamW, MatchesTorchAdamWStepForStep) {
  std::vector<torch::Tensor> fusedParams = makeParams(torch::kFloat32), plainParams = makeParams(torch::kFloat32);
  auto fused = makeOptimizer<FusedAdamW>(fusedParams);
  auto plain = makeOptimizer<AdamW>(plainParams);
  for (int64_t step = 1; step <= kSteps; ++step) {
    setGradients(fusedParams, step);
    setGradients(plainParams, step);
    setLr(*fused, 1e-2 / double(step));
    setLr(*plain, 1e-2 / double(step));
    fused->step();
    plain->step();
    for (size_t i = 0; i < fusedParams.size(); ++i) {
      EXPECT_LT(maxRelativeDifference(fusedParams[i].detach(), plainParams[i].detach()), 1e-6)
          << "parameter " << i << " step " << step;
      const AdamWParamState& f = stateOf(*fused, fusedParams[i]);
      const AdamWParamState& p = stateOf(*plain, plainParams[i]);
      EXPECT_EQ(f.step(), p.step()) << "parameter " << i << " step " << step;
      EXPECT_LT(maxRelativeDifference(f.exp_avg(), p.exp_avg()), 1e-6);
      EXPECT_LT(maxRelativeDifference(f.exp_avg_sq(), p.exp_avg_sq()), 1e-6);
    }
  }
  EXPECT_EQ(stateOf(*fused, fusedParams[2]).step(), kSteps - kSteps / 3);  // no gradient at every third step
}

// The state is torch::optim::AdamW's: saved by one, loaded by the other, the runs continue alike.
TEST(FusedAdamW, CheckpointsAreTorchAdamWCheckpoints) {
  std::vector<torch::Tensor> params = makeParams(torch::kFloat32);
  auto fused = makeOptimizer<FusedAdamW>(params);
  for (int64_t step = 1; step <= 4; ++step) {
    setGradients(params, step);
    fused->step();
  }
  std::stringstream saved;
  torch::save(*fused, saved);
  std::vector<torch::Tensor> plainParams = makeParams(torch::kFloat32);
  {
    torch::NoGradGuard noGrad;
    for (size_t i = 0; i < params.size(); ++i) plainParams[i].copy_(params[i]);
  }
  auto plain = makeOptimizer<AdamW>(plainParams);
  torch::load(*plain, saved);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(stateOf(*plain, plainParams[i]).step(), stateOf(*fused, params[i]).step());
    EXPECT_TRUE(torch::equal(stateOf(*plain, plainParams[i]).exp_avg(), stateOf(*fused, params[i]).exp_avg()));
  }
  setGradients(params, 5);
  setGradients(plainParams, 5);
  fused->step();
  plain->step();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_LT(maxRelativeDifference(params[i].detach(), plainParams[i].detach()), 1e-6) << i;
}

TEST(FusedAdamW, SkipFlagLeavesParametersAndMomentsUnchanged) {
  std::vector<torch::Tensor> params = makeParams(torch::kFloat32), reference = makeParams(torch::kFloat32);
  auto fused = makeOptimizer<FusedAdamW>(params);
  auto unskipped = makeOptimizer<FusedAdamW>(reference);
  setGradients(params, 1);
  setGradients(reference, 1);
  fused->stepUnless(torch::zeros({}));
  unskipped->step();
  setGradients(params, 2);
  const torch::Tensor before = params[0].detach().clone(), avg = stateOf(*fused, params[0]).exp_avg().clone();
  fused->stepUnless(torch::ones({}));
  EXPECT_TRUE(torch::equal(params[0].detach(), before));
  EXPECT_TRUE(torch::equal(stateOf(*fused, params[0]).exp_avg(), avg));
  for (size_t i = 0; i < params.size(); ++i)  // the unskipped step equals step()
    EXPECT_TRUE(torch::equal(params[i].detach(), reference[i].detach())) << i;
}

// float64 parameters: no fused path, so torch::optim::AdamW's own step, bit for bit, and the skip
// flag read on the host.
TEST(FusedAdamW, FallbackIsTorchAdamW) {
  std::vector<torch::Tensor> params = makeParams(torch::kFloat64), plainParams = makeParams(torch::kFloat64);
  auto fused = makeOptimizer<FusedAdamW>(params);
  auto plain = makeOptimizer<AdamW>(plainParams);
  for (int64_t step = 1; step <= 4; ++step) {
    setGradients(params, step);
    setGradients(plainParams, step);
    fused->stepUnless(torch::zeros({}, torch::kFloat32));
    plain->step();
  }
  setGradients(params, 5);
  fused->stepUnless(torch::ones({}, torch::kFloat32));  // skipped
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i].detach(), plainParams[i].detach())) << i;
    EXPECT_EQ(stateOf(*fused, params[i]).step(), stateOf(*plain, plainParams[i]).step()) << i;
  }
}
