// The model's building blocks (runtime/model/layers.h) against the composed torch formulas they
// replace: RMSNorm through ATen's rms_norm, the short convolution with its activation and
// SwiGLU's product (CUDA kernels on the GPU, composed torch ops on the CPU). The Layers suite runs
// on the CPU; LayersCuda (label gpu) runs the checks on a GPU, where the fused kernels are taken.
#include "model/layers.h"

#include "ops/short_conv.h"
#include "ops/l2_norm.h"
#include "ops/rms_norm.h"
#include "ops/swiglu.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdlib>
#include <string>
#include <vector>

namespace linac::model {
namespace {

/// The RMSNorm formula the model composed before it used at::rms_norm.
torch::Tensor composedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps = kNormEps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * weight;
}

/// Largest |a - b| over max(1, largest |b|): values and gradients here are of order one.
/// ||a - b|| / ||b|| in float64.
double relRms(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.to(torch::kFloat64), y = b.to(torch::kFloat64);
  return ((x - y).pow(2).mean().sqrt() / y.pow(2).mean().sqrt().clamp_min(1e-30)).item<double>();
}

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

/// The short convolution's definition written out in float64: z_t = sum_j w_j x_{t-W+1+j}
/// (x before t = 0 is 0), then the activation. x [B, T, C], weight [C, 1, W].
torch::Tensor referenceShortConv(const torch::Tensor& x, const torch::Tensor& weight, runtime::Activation a) {
  const int64_t T = x.size(1), W = weight.size(-1);
  torch::Tensor x64 = x.to(torch::kFloat64), w64 = weight.to(torch::kFloat64);
  torch::Tensor z = torch::zeros_like(x64);  // [B, T, C]
  for (int64_t j = 0; j < W; ++j) {
    const int64_t lag = W - 1 - j;  // w_j takes x_{t - lag}
    if (lag >= T) continue;
    torch::Tensor shifted = torch::constant_pad_nd(x64, {0, 0, lag, 0}).narrow(1, 0, T);  // x_{t - lag}
    z = z + shifted * w64.select(1, 0).select(1, j);  // [C] broadcast over [B, T, C]
  }
  return activate(z, a);
}

const std::vector<runtime::Activation> kActivations = {
    runtime::Activation::None, runtime::Activation::Silu, runtime::Activation::Sigmoid,
    runtime::Activation::Relu, runtime::Activation::Tanh, runtime::Activation::Elu1};

/// Values and gradients (x, weight) of causalConvActivated for one shape, dtype and activation
/// against float64 references: the definition (referenceShortConv), or with `againstConv1d` the
/// composed path (torch::conv1d, then the activation). Errors as rel-RMS (bf16 / fp16) or scaled
/// max error (fp32).
struct ConvErrors {
  double y = 0, dx = 0, dw = 0;
};
ConvErrors shortConvErrors(torch::Device device, torch::Dtype dtype, int64_t B, int64_t T, int64_t C, int64_t W,
                           runtime::Activation a, bool againstConv1d = false) {
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  torch::Tensor x0 = torch::randn({B, T, C}, opts);
  torch::Tensor w0 = (torch::randn({C, 1, W}, opts.dtype(torch::kFloat32)) / std::sqrt(double(W)));
  torch::Tensor probe = torch::randn({B, T, C}, opts);
  auto run = [&](bool reference) {
    torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    torch::Tensor y = !reference     ? causalConvActivated(x, w, a)
                      : againstConv1d ? activate(causalConv(x.to(torch::kFloat64), w.to(torch::kFloat64)), a)
                                      : referenceShortConv(x, w, a);
    (y * probe.to(y.scalar_type())).sum().backward();
    return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad()};
  };
  const auto ours = run(false), reference = run(true);
  EXPECT_EQ(ours[0].scalar_type(), dtype);
  EXPECT_EQ(ours[1].scalar_type(), dtype);
  EXPECT_EQ(ours[2].scalar_type(), torch::kFloat32);
  auto err = [&](size_t i) { return dtype == torch::kFloat32 ? maxError(ours[i], reference[i]) : relRms(ours[i], reference[i]); };
  return {err(0), err(1), err(2)};
}

std::string describeCase(int64_t B, int64_t T, int64_t C, int64_t W, runtime::Activation a) {
  return "B " + std::to_string(B) + " T " + std::to_string(T) + " C " + std::to_string(C) + " W " +
         std::to_string(W) + " activation " + std::to_string(static_cast<int>(a));
}

// The CPU path (torch::conv1d with W - 1 zeros of left padding, then the activation) computes the
// convolution the CUDA kernel's header defines, for every activation the specs use.
TEST(Layers, CausalConvActivatedOnTheCpuMatchesTheDefinition) {
  torch::manual_seed(11);
  EXPECT_FALSE(ops::shortConvSupported(torch::randn({1, 4, 3}), torch::randn({3, 1, 4})));
  for (runtime::Activation a : kActivations) {
    const ConvErrors e = shortConvErrors(torch::kCPU, torch::kFloat32, 2, 9, 6, 4, a);
    EXPECT_LE(e.y, 1e-6) << describeCase(2, 9, 6, 4, a);
    EXPECT_LE(e.dx, 1e-6) << describeCase(2, 9, 6, 4, a);
    EXPECT_LE(e.dw, 1e-6) << describeCase(2, 9, 6, 4, a);
  }
  // Fewer tokens than taps.
  const ConvErrors e = shortConvErrors(torch::kCPU, torch::kFloat32, 1, 2, 3, 4, runtime::Activation::Silu);
  EXPECT_LE(std::max({e.y, e.dx, e.dw}), 1e-6);
}

/// Packed documents: row b of x holds documents starting at the positions where `positions` is 0.
/// Values and gradients of causalConvActivatedWithin against the definition applied to each
/// document alone (float64), as for shortConvErrors.
ConvErrors withinDocumentsErrors(torch::Device device, torch::Dtype dtype, const torch::Tensor& positions, int64_t C,
                                 int64_t W, runtime::Activation a) {
  const int64_t B = positions.size(0), T = positions.size(1);
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  torch::Tensor x0 = torch::randn({B, T, C}, opts);
  torch::Tensor w0 = torch::randn({C, 1, W}, opts.dtype(torch::kFloat32)) / std::sqrt(double(W));
  torch::Tensor probe = torch::randn({B, T, C}, opts);
  const torch::Tensor hostPositions = positions.to(torch::kCPU);
  auto run = [&](bool reference) {
    torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    torch::Tensor y;
    if (!reference) {
      y = causalConvActivatedWithin(x, w, a, positions.to(device));
    } else {  // each document through the definition alone
      std::vector<torch::Tensor> rows;
      for (int64_t b = 0; b < B; ++b) {
        std::vector<torch::Tensor> pieces;
        for (int64_t start = 0; start < T;) {
          int64_t end = start + 1;
          while (end < T && hostPositions[b][end].item<int64_t>() != 0) ++end;
          pieces.push_back(referenceShortConv(x.narrow(0, b, 1).narrow(1, start, end - start), w, a));
          start = end;
        }
        rows.push_back(torch::cat(pieces, 1));
      }
      y = torch::cat(rows, 0);
    }
    (y * probe.to(y.scalar_type())).sum().backward();
    return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad()};
  };
  const auto ours = run(false), reference = run(true);
  EXPECT_EQ(ours[0].scalar_type(), dtype);
  auto err = [&](size_t i) { return dtype == torch::kFloat32 ? maxError(ours[i], reference[i]) : relRms(ours[i], reference[i]); };
  return {err(0), err(1), err(2)};
}

/// Positions [2, T] of documents starting at 0 and at `starts` (row 0) / `starts` + 1 (row 1):
/// documents of one token, of fewer tokens than taps, and long ones.
torch::Tensor documentPositions(int64_t T, const std::vector<int64_t>& starts) {
  torch::Tensor p = torch::empty({2, T}, torch::kInt64);
  for (int64_t b = 0; b < 2; ++b) {
    int64_t last = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (std::find(starts.begin(), starts.end(), t - b) != starts.end()) last = t;
      p[b][t] = t - last;
    }
  }
  return p;
}

TEST(Layers, CausalConvWithinDocumentsIsEachDocumentAlone) {
  torch::manual_seed(12);
  const torch::Tensor positions = documentPositions(40, {1, 2, 5, 20, 39});
  for (runtime::Activation a : {runtime::Activation::Silu, runtime::Activation::None}) {
    const ConvErrors e = withinDocumentsErrors(torch::kCPU, torch::kFloat32, positions, 6, 4, a);
    EXPECT_LE(std::max({e.y, e.dx, e.dw}), 1e-6) << static_cast<int>(a);
  }
}

TEST(Layers, ShortConvOpRefusesCpuTensors) {
  torch::Tensor x = torch::randn({1, 4, 3});
  EXPECT_THROW(ops::shortConv(x, torch::randn({3, 1, 4}), runtime::Activation::Silu), std::invalid_argument);
}

// The CPU has no fused SwiGLU product: the op refuses CPU tensors, and the model composes
// torch::silu(gate) * up there.
TEST(Layers, SwigluProductRefusesCpuTensors) {
  torch::Tensor g = torch::randn({3, 8}), u = torch::randn({3, 8});
  EXPECT_FALSE(ops::swigluProductSupported(g, u));
  EXPECT_THROW(ops::swigluProduct(g, u), std::invalid_argument);
}

// A block's normalised input goes to its projections as one copy in autocast's dtype (one cast,
// one conversion of the summed gradient) when autocast is on; otherwise it is passed through.
TEST(Layers, AutocastInputCastsOnceUnderAutocastOnly) {
  torch::manual_seed(31);
  torch::Tensor x = torch::randn({2, 5, 16}).requires_grad_(true);
  EXPECT_TRUE(autocastInput(x).is_same(x));  // autocast off
  torch::Tensor w1 = torch::randn({8, 16}), w2 = torch::randn({4, 16});
  {
    AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    torch::Tensor n = autocastInput(x);
    EXPECT_EQ(n.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(n, x.detach().to(torch::kBFloat16)));
    torch::Tensor half = torch::randn({3}).to(torch::kBFloat16);
    EXPECT_TRUE(autocastInput(half).is_same(half));  // already reduced
    // two projections read the one copy; x's gradient is theirs, summed, in fp32
    (torch::linear(n, w1).sum() + torch::linear(n, w2).sum()).backward();
  }
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().scalar_type(), torch::kFloat32);
  const torch::Tensor want = (w1.sum(0) + w2.sum(0)).expand_as(x);
  EXPECT_LE(maxError(x.grad(), want) / want.abs().max().item<double>(), 1e-2);  // bf16 weights
}

// Off CUDA a block's norms compose: blockNorm is rmsNorm then autocastInput, addBlockNorm adds
// first (and the fused op refuses CPU tensors).
TEST(Layers, BlockNormsOnTheCpuCompose) {
  torch::manual_seed(37);
  torch::Tensor x = torch::randn({2, 5, 32}), r = torch::randn({2, 5, 32}), w = 1.0 + 0.1 * torch::randn({32});
  EXPECT_FALSE(ops::rmsNormSupported(x, r, w, torch::kFloat32));
  EXPECT_THROW(ops::rmsNorm(x, w, kNormEps, torch::kFloat32), std::invalid_argument);
  EXPECT_LE(maxError(blockNorm(x, w), rmsNorm(x, w)), 0.0);
  auto [h, y] = addBlockNorm(x, r, w);
  EXPECT_LE(maxError(h, x + r), 0.0);
  EXPECT_LE(maxError(y, rmsNorm(x + r, w)), 0.0);
  AutocastScope autocast(torch::kCPU, torch::kBFloat16);
  EXPECT_EQ(blockNorm(x, w).scalar_type(), torch::kBFloat16);
  EXPECT_EQ(addBlockNorm(x, r, w).first.scalar_type(), torch::kFloat32);  // the residual stream stays fp32
}

// Off CUDA the gated output norm composes: rmsNorm(o, w) * gate (the fused op refuses CPU tensors).
TEST(Layers, GatedRmsNormOnTheCpuComposes) {
  torch::manual_seed(53);
  torch::Tensor o = torch::randn({2, 5, 3, 16}), w = 1.0 + 0.1 * torch::randn({16}), a = torch::rand({2, 5, 3, 16});
  EXPECT_FALSE(ops::rmsNormGatedSupported(o, a, w, torch::kFloat32));
  EXPECT_THROW(ops::rmsNormGated(o, w, a, kNormEps, torch::kFloat32), std::invalid_argument);
  EXPECT_LE(maxError(gatedRmsNorm(o, w, a), rmsNorm(o, w) * a), 0.0);
}

// The CPU has no fused L2 norm: the op refuses CPU tensors, and l2Normalize composes torch ops
// there (x * rsqrt(sum x^2 + eps), fla's l2norm).
TEST(Layers, L2NormalizeOnTheCpuIsTheComposedFormula) {
  torch::manual_seed(23);
  torch::Tensor x = torch::randn({2, 5, 3, 64}, torch::kFloat64);
  EXPECT_FALSE(ops::l2NormalizeSupported(x));
  EXPECT_THROW(ops::l2Normalize(x, kNormEps), std::invalid_argument);
  torch::Tensor y = l2Normalize(x);
  EXPECT_LE(maxError(y, x / (x.pow(2).sum(-1, true) + kNormEps).sqrt()), 1e-15);
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

// The fused kernel against torch::conv1d + the activation in float64: shapes that cut the time tiles (64 tokens)
// and the channel blocks (128) unevenly, fewer tokens than taps, every width up to 8, every
// activation, fp32 / bf16 / fp16 inputs (the weight fp32, as the model's parameters are).
TEST_F(LayersCuda, ShortConvMatchesTheDefinition) {
  torch::manual_seed(13);
  struct Case {
    int64_t B, T, C, W;
  };
  const std::vector<Case> cases = {{2, 1, 8, 4},    {1, 2, 16, 4},   {1, 63, 130, 4}, {3, 200, 64, 3},
                                   {2, 130, 96, 1}, {1, 129, 40, 8}, {2, 64, 256, 2}, {1, 300, 300, 5},
                                   {2, 77, 33, 6},  {1, 65, 129, 7}};
  struct Gate {
    torch::Dtype dtype;
    double tolerance;  // fp32: scaled max error; bf16 / fp16: rel-RMS (one rounding of y and dx)
  };
  for (const Gate g : {Gate{torch::kFloat32, 1e-5}, Gate{torch::kBFloat16, 8e-3}, Gate{torch::kHalf, 1e-3}}) {
    for (const Case& c : cases) {
      for (runtime::Activation a : kActivations) {
        if (a != runtime::Activation::Silu && c.W != 4) continue;  // every activation on the W = 4 shapes
        const ConvErrors e = shortConvErrors(torch::kCUDA, g.dtype, c.B, c.T, c.C, c.W, a, /*againstConv1d=*/true);
        const std::string what = describeCase(c.B, c.T, c.C, c.W, a) + " dtype " + std::string(c10::toString(g.dtype));
        EXPECT_LE(e.y, g.tolerance) << "values, " << what;
        EXPECT_LE(e.dx, g.tolerance) << "d x, " << what;
        EXPECT_LE(e.dw, g.tolerance) << "d weight, " << what;
      }
    }
  }
}

// The fused kernel with packed documents (positions) against each document through the
// definition alone: documents of one token and of fewer tokens than taps, boundaries inside and
// at the edges of the 64-token time tiles, widths 2 to 8.
TEST_F(LayersCuda, ShortConvWithinDocumentsIsEachDocumentAlone) {
  torch::manual_seed(14);
  const torch::Tensor positions = documentPositions(200, {1, 2, 5, 63, 64, 66, 127, 130, 199});
  for (int64_t W : {2, 4, 8}) {
    for (const auto& [dtype, tolerance] : {std::pair{torch::kFloat32, 1e-5}, std::pair{torch::kBFloat16, 8e-3}}) {
      const ConvErrors e = withinDocumentsErrors(torch::kCUDA, dtype, positions, 130, W, runtime::Activation::Silu);
      const std::string what = "W " + std::to_string(W) + " dtype " + std::string(c10::toString(dtype));
      EXPECT_LE(e.y, tolerance) << "values, " << what;
      EXPECT_LE(e.dx, tolerance) << "d x, " << what;
      EXPECT_LE(e.dw, tolerance) << "d weight, " << what;
    }
  }
}

// The weight's gradient is summed in a fixed order: two backward passes give the same bits. A
// strided x (a transposed view) gives what its contiguous copy gives; only the wanted gradient is made.
TEST_F(LayersCuda, ShortConvIsDeterministicAndTakesStridedInputs) {
  torch::manual_seed(17);
  auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  torch::Tensor xT = torch::randn({2, 96, 500}, opts);  // [B, C, T]
  torch::Tensor x = xT.transpose(1, 2);                  // [B, T, C], strided
  torch::Tensor w = torch::randn({96, 1, 4}, opts.dtype(torch::kFloat32)).requires_grad_(true);
  auto weightGrad = [&](const torch::Tensor& input) {
    w.mutable_grad() = torch::Tensor();
    causalConvActivated(input, w, runtime::Activation::Silu).sum().backward();
    return w.grad().clone();
  };
  const torch::Tensor first = weightGrad(x), second = weightGrad(x), contiguous = weightGrad(x.contiguous());
  EXPECT_TRUE(torch::equal(first, second));
  EXPECT_TRUE(torch::equal(first, contiguous));
  torch::Tensor xg = x.detach().clone().requires_grad_(true);
  causalConvActivated(xg, w.detach(), runtime::Activation::Silu).sum().backward();
  EXPECT_TRUE(xg.grad().defined());
}

// The fused SwiGLU product against torch::silu(g) * u in float64: values and both gradients, for
// element counts that leave a tail after the vectorized body, and for inputs one element off the
// vector alignment (views narrowed by one: the element-wise path).
TEST_F(LayersCuda, SwigluProductMatchesTheComposedProduct) {
  torch::manual_seed(19);
  struct Gate {
    torch::Dtype dtype;
    double tolerance;  // rel-RMS
  };
  for (const Gate gate : {Gate{torch::kFloat32, 1e-6}, Gate{torch::kBFloat16, 8e-3}, Gate{torch::kHalf, 1e-3}}) {
    for (int64_t n : {1, 7, 1000, 4099, 1 << 18}) {
      for (int64_t offset : {0, 1}) {
        auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(gate.dtype);
        const torch::Tensor gData = 2.0 * torch::randn({n + offset}, opts), uData = torch::randn({n + offset}, opts);
        const torch::Tensor probe = torch::randn({n}, opts);
        auto run = [&](bool reference) {
          const auto dtype = reference ? torch::kFloat64 : gate.dtype;
          // detached: the first run's leaves must not turn the second run's copies into non-leaves
          torch::Tensor gBase = gData.to(dtype).detach().requires_grad_(true);
          torch::Tensor uBase = uData.to(dtype).detach().requires_grad_(true);
          torch::Tensor g = gBase.narrow(0, offset, n), u = uBase.narrow(0, offset, n);  // [n]
          torch::Tensor y = reference ? torch::silu(g) * u : ops::swigluProduct(g, u);
          (y * probe.to(dtype)).sum().backward();
          return std::vector<torch::Tensor>{y.detach(), gBase.grad().narrow(0, offset, n), uBase.grad().narrow(0, offset, n)};
        };
        const auto ours = run(false), reference = run(true);
        const char* names[] = {"values", "d g", "d u"};
        for (size_t i = 0; i < ours.size(); ++i) {
          EXPECT_EQ(ours[i].scalar_type(), gate.dtype) << names[i];
          const torch::Tensor a = ours[i].to(torch::kFloat64), b = reference[i];
          const double err = ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt().clamp_min(1e-30)).item<double>();
          EXPECT_LE(err, gate.tolerance) << names[i] << ", n " << n << " offset " << offset << " dtype " << gate.dtype;
        }
      }
    }
  }
}

// The fused L2 norm against the composed formula in float64: values and the gradient, row
// lengths that take the vector path (16-byte accesses: 64, 128, 256, 40 in fp32) and the
// element-wise one (33, 130 in bf16 / fp16, 1), a view one element off the alignment, rows of zeros
// (eps keeps them finite), and a large-magnitude row.
TEST_F(LayersCuda, L2NormalizeMatchesTheComposedFormula) {
  torch::manual_seed(29);
  struct Gate {
    torch::Dtype dtype;
    double tolerance;  // rel-RMS: one rounding of y and of dx
  };
  for (const Gate gate : {Gate{torch::kFloat32, 1e-6}, Gate{torch::kBFloat16, 8e-3}, Gate{torch::kHalf, 1e-3}}) {
    for (int64_t D : {64, 128, 256, 40, 33, 130, 1}) {
      for (int64_t offset : {0, 1}) {
        auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(gate.dtype);
        const int64_t rows = 3 * 70 * 2;  // [B, T, H] = [3, 70, 2]
        torch::Tensor data = torch::randn({rows * D + offset}, opts);
        data.narrow(0, offset, D).zero_();                    // a row of zeros
        data.narrow(0, offset + D, D).mul_(100.0);             // a large one
        const torch::Tensor probe = torch::randn({3, 70, 2, D}, opts);
        auto run = [&](bool reference) {
          const auto dtype = reference ? torch::kFloat64 : gate.dtype;
          torch::Tensor base = data.to(dtype).detach().requires_grad_(true);  // a fresh leaf each run
          torch::Tensor x = base.narrow(0, offset, rows * D).view({3, 70, 2, D});
          torch::Tensor y = reference ? x / (x.pow(2).sum(-1, true) + kNormEps).sqrt() : l2Normalize(x);
          (y * probe.to(dtype)).sum().backward();
          return std::vector<torch::Tensor>{y.detach(), base.grad().narrow(0, offset, rows * D)};
        };
        const auto ours = run(false), reference = run(true);
        const char* names[] = {"values", "d x"};
        for (size_t i = 0; i < ours.size(); ++i) {
          EXPECT_EQ(ours[i].scalar_type(), gate.dtype) << names[i];
          const torch::Tensor a = ours[i].to(torch::kFloat64), b = reference[i];
          EXPECT_TRUE(torch::isfinite(a).all().item<bool>()) << names[i] << ", D " << D << " dtype " << gate.dtype;
          const double err = ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt().clamp_min(1e-30)).item<double>();
          EXPECT_LE(err, gate.tolerance) << names[i] << ", D " << D << " offset " << offset << " dtype " << gate.dtype;
        }
      }
    }
  }
}

// The fused RMSNorm (and residual add) against the composed formula in float64: y, and the
// gradients of x, the residual and the weight of <y, p> + <h, q> (so h's other use feeds its
// gradient in), for every element-type combination the kernels have, dims on the vector path
// (1024, 64) and off it (130, 7), with and without the residual. The weight's gradient is summed
// in a fixed order: a second run gives the same bits.
TEST_F(LayersCuda, RmsNormFusedMatchesTheComposedFormula) {
  torch::manual_seed(41);
  struct Types {
    torch::Dtype x, out;  // the residual is `out`'s dtype, as in training (fp32 stream, bf16 mixer)
    double tolerance;     // rel-RMS: roundings of y, h and the gradients in their dtypes
  };
  const Types combos[] = {{torch::kFloat32, torch::kFloat32, 1e-6}, {torch::kFloat32, torch::kBFloat16, 8e-3},
                          {torch::kFloat32, torch::kHalf, 1e-3},    {torch::kBFloat16, torch::kBFloat16, 8e-3},
                          {torch::kHalf, torch::kHalf, 1e-3}};
  auto opts = torch::TensorOptions().device(torch::kCUDA);
  for (const Types& t : combos) {
    for (int64_t D : {1024, 64, 130, 7}) {
      for (bool add : {false, true}) {
        // [B, T] = [3, 300]: 900 rows, more than one slice of the weight gradient's pass
        const torch::Tensor x0 = torch::randn({3, 300, D}, opts), r0 = torch::randn({3, 300, D}, opts);
        const torch::Tensor w0 = 1.0 + 0.1 * torch::randn({D}, opts);
        const torch::Tensor p = torch::randn({3, 300, D}, opts), q = torch::randn({3, 300, D}, opts);
        auto run = [&](bool reference) {
          // the inputs as the kernel reads them; the reference takes their exact float64 values
          auto leaf = [&](const torch::Tensor& t0, torch::Dtype dtype) {
            const torch::Tensor v = t0.to(dtype);
            return (reference ? v.to(torch::kFloat64) : v).detach().requires_grad_(true);
          };
          torch::Tensor x = leaf(x0, t.x), r = leaf(r0, t.out), w = leaf(w0, torch::kFloat32);
          torch::Tensor h, y;
          if (reference) {
            h = add ? x + r : x;
            if (add)  // rounded to x's dtype, as the kernel (and the composed add) rounds it
              h = h + (h.detach().to(t.x).to(torch::kFloat64) - h.detach());
            y = h * torch::rsqrt(h.pow(2).mean(-1, true) + kNormEps) * w;
          } else if (add) {
            std::tie(h, y) = ops::addRmsNorm(x, r, w, kNormEps, t.out);
          } else {
            h = x;
            y = ops::rmsNorm(x, w, kNormEps, t.out);
          }
          torch::Tensor loss = (y.to(torch::kFloat64) * p.to(torch::kFloat64)).sum();
          if (add) loss = loss + (h.to(torch::kFloat64) * q.to(torch::kFloat64)).sum();
          loss.backward();
          std::vector<torch::Tensor> out = {y.detach(), x.grad(), w.grad()};
          if (add) out.push_back(r.grad());
          if (add) out.push_back(h.detach());
          return out;
        };
        const auto ours = run(false), reference = run(true);
        const char* names[] = {"y", "d x", "d weight", "d residual", "h"};
        for (size_t i = 0; i < ours.size(); ++i) {
          ASSERT_TRUE(ours[i].defined()) << names[i];
          EXPECT_LE(relRms(ours[i], reference[i]), t.tolerance) << names[i] << ", D " << D << (add ? " with" : " without") << " residual, x "
                                      << t.x << ", out " << t.out;
        }
        EXPECT_EQ(ours[0].scalar_type(), t.out);
        const auto again = run(false);
        EXPECT_TRUE(torch::equal(ours[2], again[2])) << "d weight not deterministic, D " << D;
      }
    }
  }
}

// The output norm with its gate (fla's FusedRMSNormGated): y = rmsNorm(x) w a against float64,
// and the gradients of <y, p> with respect to x, w and the gate a, for the element types of a
// mixer's output (x and a in the kernel dtype, y in it or in autocast's), dims on the vector path
// (512, 64) and off it (130, 7); the weight's gradient deterministic.
TEST_F(LayersCuda, GatedRmsNormMatchesTheComposedFormula) {
  torch::manual_seed(47);
  struct Types {
    torch::Dtype x, out;
    double tolerance;  // rel-RMS: roundings of y, the gate and the gradients in their dtypes
  };
  const Types combos[] = {{torch::kFloat32, torch::kFloat32, 1e-6}, {torch::kBFloat16, torch::kBFloat16, 8e-3},
                          {torch::kHalf, torch::kHalf, 1e-3}};
  auto opts = torch::TensorOptions().device(torch::kCUDA);
  for (const Types& t : combos) {
    for (int64_t D : {512, 64, 130, 7}) {
      // [B, T, H, D] = [2, 150, 3, D]: 900 rows
      const torch::Tensor x0 = torch::randn({2, 150, 3, D}, opts), a0 = torch::sigmoid(torch::randn({2, 150, 3, D}, opts));
      const torch::Tensor w0 = 1.0 + 0.1 * torch::randn({D}, opts), p = torch::randn({2, 150, 3, D}, opts);
      auto run = [&](bool reference) {
        auto leaf = [&](const torch::Tensor& t0, torch::Dtype dtype) {
          const torch::Tensor v = t0.to(dtype);
          return (reference ? v.to(torch::kFloat64) : v).detach().requires_grad_(true);
        };
        torch::Tensor x = leaf(x0, t.x), a = leaf(a0, t.out), w = leaf(w0, torch::kFloat32);
        torch::Tensor y = reference ? x * torch::rsqrt(x.pow(2).mean(-1, true) + kNormEps) * w * a
                                    : ops::rmsNormGated(x, w, a, kNormEps, t.out);
        (y.to(torch::kFloat64) * p.to(torch::kFloat64)).sum().backward();
        return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad(), a.grad()};
      };
      const auto ours = run(false), reference = run(true);
      const char* names[] = {"y", "d x", "d weight", "d gate"};
      for (size_t i = 0; i < ours.size(); ++i) {
        ASSERT_TRUE(ours[i].defined()) << names[i];
        EXPECT_LE(relRms(ours[i], reference[i]), t.tolerance) << names[i] << ", D " << D << ", x " << t.x;
      }
      EXPECT_EQ(ours[0].scalar_type(), t.out);
      EXPECT_EQ(ours[3].scalar_type(), t.out);
      EXPECT_TRUE(torch::equal(ours[2], run(false)[2])) << "d weight not deterministic, D " << D;
    }
  }
  // a gate the kernel cannot take (another shape) is refused, and gatedRmsNorm composes instead
  torch::Tensor x = torch::randn({2, 8, 3, 64}, opts), w = torch::ones({64}, opts), a = torch::rand({2, 8, 3, 1}, opts);
  EXPECT_FALSE(ops::rmsNormGatedSupported(x, a, w, torch::kFloat32));
  EXPECT_LE(maxError(gatedRmsNorm(x, w, a), rmsNorm(x, w) * a), 0.0);
  // under autocast the fused path hands the output projection bf16
  torch::Tensor xb = x.to(torch::kBFloat16), ab = torch::rand({2, 8, 3, 64}, opts).to(torch::kBFloat16);
  AutocastScope autocast(torch::kCUDA, torch::kBFloat16);
  torch::Tensor y = gatedRmsNorm(xb, w, ab);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_LE(relRms(y, rmsNorm(xb, w) * ab), 8e-3);
}

// Under CUDA autocast a block's norm hands the projections bf16 directly (the fused kernel), the
// residual stream stays fp32, and the values are the composed path's.
TEST_F(LayersCuda, BlockNormsUnderAutocastMatchTheComposedPath) {
  torch::manual_seed(43);
  auto opts = torch::TensorOptions().device(torch::kCUDA);
  torch::Tensor x = torch::randn({2, 64, 256}, opts), w = 1.0 + 0.1 * torch::randn({256}, opts);
  torch::Tensor mixed = torch::randn({2, 64, 256}, opts).to(torch::kBFloat16);
  AutocastScope autocast(torch::kCUDA, torch::kBFloat16);
  torch::Tensor n = blockNorm(x, w);
  EXPECT_EQ(n.scalar_type(), torch::kBFloat16);
  EXPECT_LE(relRms(n, autocastInput(rmsNorm(x, w))), 8e-3);
  auto [h, m] = addBlockNorm(x, mixed, w);
  EXPECT_EQ(h.scalar_type(), torch::kFloat32);
  EXPECT_EQ(m.scalar_type(), torch::kBFloat16);
  EXPECT_LE(maxError(h, x + mixed), 0.0);
  EXPECT_LE(relRms(m, autocastInput(rmsNorm(x + mixed, w))), 8e-3);
}

}  // namespace
}  // namespace linac::model
