// The model's building blocks (runtime/model/layers.h) against the composed torch formulas they
// replace: RMSNorm through ATen's rms_norm. The Layers suite runs on the CPU; LayersCuda (label
// gpu) runs the checks on a GPU, where the fused kernels are taken.
#include "model/layers.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

namespace linac::model {
namespace {

/// The RMSNorm formula the model composed before it used at::rms_norm.
torch::Tensor composedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps = kNormEps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * weight;
}

/// Largest |a - b| over max(1, largest |b|): values and gradients here are of order one.
double maxError(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor x = a.to(torch::kFloat64).cpu(), y = b.to(torch::kFloat64).cpu();
  return (x - y).abs().max().item<double>() / std::max(1.0, y.abs().max().item<double>());
}

/// Autocast on for `device` in `dtype` while in scope (the trainer's bf16 autocast on CUDA).
class AutocastScope {
public:
  AutocastScope(at::DeviceType device, at::ScalarType dtype)
      : device_(device), enabled_(at::autocast::is_autocast_enabled(device)),
        dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_dtype(device, dtype);
    at::autocast::set_autocast_enabled(device, true);
  }
  ~AutocastScope() {
    at::autocast::set_autocast_enabled(device_, enabled_);
    at::autocast::set_autocast_dtype(device_, dtype_);
    at::autocast::clear_cache();
  }

private:
  at::DeviceType device_;
  bool enabled_;
  at::ScalarType dtype_;
};

/// rmsNorm and the composed formula on the same x [2, 5, 3, D] and weight [D] in `dtype` on
/// `device`: values and the gradients of x and weight of a random linear functional of the output.
void checkRmsNormAgainstComposed(torch::Device device, torch::Dtype dtype, double tolerance) {
  torch::manual_seed(7);
  const int64_t D = 48;
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  torch::Tensor x0 = torch::randn({2, 5, 3, D}, opts), w0 = 1.0 + 0.1 * torch::randn({D}, opts);
  torch::Tensor probe = torch::randn({2, 5, 3, D}, opts);
  auto run = [&](bool composed) {
    torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    torch::Tensor y = composed ? composedRmsNorm(x, w) : rmsNorm(x, w);
    (y * probe).sum().backward();
    return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad()};
  };
  const auto ours = run(false), reference = run(true);
  const char* names[] = {"values", "d x", "d weight"};
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i].scalar_type(), dtype) << names[i];
    EXPECT_LE(maxError(ours[i], reference[i]), tolerance) << names[i];
  }
}

TEST(Layers, RmsNormMatchesTheComposedFormula) {
  checkRmsNormAgainstComposed(torch::kCPU, torch::kFloat32, 1e-6);
  checkRmsNormAgainstComposed(torch::kCPU, torch::kFloat64, 1e-14);
}

// Under autocast a bf16 input is normalised in fp32 and the result is fp32, as autocast made of
// the composed formula (pow and rsqrt on its fp32 list); the weight is used in fp32.
TEST(Layers, RmsNormUnderAutocastComputesInFp32) {
  torch::manual_seed(3);
  torch::Tensor x = torch::randn({4, 64}).to(torch::kBFloat16), w = torch::randn({64});
  torch::Tensor y;
  {
    AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    y = rmsNorm(x, w);
  }
  EXPECT_EQ(y.scalar_type(), torch::kFloat32);
  EXPECT_LE(maxError(y, composedRmsNorm(x.to(torch::kFloat32), w)), 1e-6);
  // Outside autocast the input's dtype is kept.
  EXPECT_EQ(rmsNorm(x, w).scalar_type(), torch::kBFloat16);
}

// --- on the GPU (label gpu) ---------------------------------------------------------------------

class LayersCuda : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_TRUE(torch::cuda::is_available()) << "LayersCuda needs a GPU"; }
};

TEST_F(LayersCuda, RmsNormMatchesTheComposedFormula) {
  checkRmsNormAgainstComposed(torch::kCUDA, torch::kFloat32, 1e-5);
}

// The trainer's case: bf16 autocast on CUDA, a bf16 input (the mixer's per-head output norm) and
// an fp32 one (the residual stream): fp32 results equal to the composed formula's under autocast.
TEST_F(LayersCuda, RmsNormUnderAutocastMatchesTheComposedFormula) {
  torch::manual_seed(5);
  auto opts = torch::TensorOptions().device(torch::kCUDA);
  torch::Tensor w = 1.0 + 0.1 * torch::randn({128}, opts);
  for (torch::Dtype dtype : {torch::kBFloat16, torch::kFloat32}) {
    torch::Tensor x = torch::randn({2, 256, 4, 128}, opts).to(dtype);
    AutocastScope autocast(torch::kCUDA, torch::kBFloat16);
    torch::Tensor ours = rmsNorm(x, w), reference = composedRmsNorm(x, w);
    EXPECT_EQ(ours.scalar_type(), torch::kFloat32);
    EXPECT_EQ(reference.scalar_type(), torch::kFloat32);
    EXPECT_LE(maxError(ours, reference), 1e-5) << dtype;
  }
}

}  // namespace
}  // namespace linac::model
