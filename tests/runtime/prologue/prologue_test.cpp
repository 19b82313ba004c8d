// Compiled prologue maps: the strided layouts the device maps read (emulated here on the CPU with
// the index arithmetic of runtime/prologue/device_map.cuh), the registry's device table, applyMap
// on the CPU, and on a GPU every generated device map against its host loop.
#include "prologue/map_op.h"
#include "prologue/strided_layout.h"
#include "registry/registry.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace linac::prologue {
namespace {

using runtime::kDeviceMapRank;

/// What a device map reads for element `flat` of the result from operand `j` (device_map.cuh's
/// unravel + load).
float emulateLoad(const StridedLayout& layout, size_t j, int64_t flat) {
  int64_t index[kDeviceMapRank];
  for (int d = kDeviceMapRank - 1; d > 0; --d) {
    index[d] = flat % layout.shape.sizes[d];
    flat /= layout.shape.sizes[d];
  }
  index[0] = flat;
  int64_t offset = 0;
  for (int d = 0; d < kDeviceMapRank; ++d) offset += index[d] * layout.operands[j].strides[d];
  return layout.operands[j].data[offset];
}

int64_t layoutNumel(const StridedLayout& layout) {
  int64_t n = 1;
  for (int64_t s : layout.shape.sizes) n *= s;
  return n;
}

/// Every element every operand reads equals the operand broadcast to the result, row-major.
void expectReadsBroadcast(const std::vector<torch::Tensor>& tensors, bool expectCopies) {
  const std::vector<int64_t> sizes = broadcastSizes(tensors);
  std::vector<torch::Tensor> keepAlive;
  const StridedLayout layout = stridedLayout(sizes, tensors, keepAlive);
  EXPECT_EQ(!keepAlive.empty(), expectCopies);
  const std::vector<torch::Tensor> expanded = torch::broadcast_tensors(tensors);
  const int64_t n = c10::multiply_integers(sizes);
  ASSERT_EQ(layoutNumel(layout), n) << c10::str(sizes);
  ASSERT_EQ(layout.operands.size(), tensors.size());
  for (size_t j = 0; j < tensors.size(); ++j) {
    const torch::Tensor want = expanded[j].contiguous().flatten();
    for (int64_t flat = 0; flat < n; ++flat)
      ASSERT_EQ(emulateLoad(layout, j, flat), want[flat].item<float>())
          << "operand " << j << " element " << flat << " of " << c10::str(sizes);
  }
}

TEST(StridedLayout, ParamsBroadcastWithStrideZero) {
  // gated_deltanet's decay: a [B, T, H, 1] with A_log and dt_bias [1, 1, H, 1].
  torch::Tensor a = torch::randn({2, 5, 3, 1}), A_log = torch::randn({1, 1, 3, 1});
  std::vector<torch::Tensor> keepAlive;
  const StridedLayout layout = stridedLayout({2, 5, 3, 1}, {A_log, a}, keepAlive);
  EXPECT_TRUE(keepAlive.empty());
  // B and T merge, the trailing 1 drops: [1, 1, B * T, H].
  EXPECT_EQ(std::vector<int64_t>(layout.shape.sizes, layout.shape.sizes + 4),
            (std::vector<int64_t>{1, 1, 10, 3}));
  EXPECT_EQ(std::vector<int64_t>(layout.operands[0].strides, layout.operands[0].strides + 4),
            (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(std::vector<int64_t>(layout.operands[1].strides, layout.operands[1].strides + 4),
            (std::vector<int64_t>{0, 0, 3, 1}));
  EXPECT_EQ(layout.operands[0].data, A_log.data_ptr<float>());
  expectReadsBroadcast({A_log, a}, false);
}

TEST(StridedLayout, NonContiguousOffsetAndScalarOperands) {
  torch::Tensor transposed = torch::randn({4, 3}).t();                // [3, 4], strides (1, 3)
  torch::Tensor sliced = torch::randn({5, 6}).narrow(0, 2, 3).narrow(1, 1, 4);  // storage offset
  torch::Tensor column = torch::randn({3, 1});
  torch::Tensor scalar = torch::randn({});
  expectReadsBroadcast({transposed, sliced, column, scalar}, false);
  expectReadsBroadcast({scalar}, false);
  expectReadsBroadcast({torch::randn({2, 3, 4, 5})}, false);
}

TEST(StridedLayout, MoreThanFourDimsReadContiguousCopies) {
  // Broadcast on every other dim: nothing merges, six dims remain.
  torch::Tensor full = torch::randn({2, 3, 2, 3, 2, 3});
  torch::Tensor alternating = torch::randn({2, 1, 2, 1, 2, 1});
  expectReadsBroadcast({full, alternating}, true);
  // Five dims that merge down to four need no copies.
  expectReadsBroadcast({torch::randn({2, 3, 4, 5, 6}), torch::randn({1, 1, 4, 1, 6})}, false);
}

TEST(StridedLayout, EmptyResult) {
  torch::Tensor a = torch::randn({0, 3}), b = torch::randn({1, 3});
  std::vector<torch::Tensor> keepAlive;
  EXPECT_EQ(layoutNumel(stridedLayout({0, 3}, {a, b}, keepAlive)), 0);
}

// --- the registry's device table ----------------------------------------------------------------

void hostForward(const float* const*, float*, int64_t) {}
void deviceForward(const runtime::StridedOperand*, float*, const runtime::MapShape&, CUstream_st*) {}

const runtime::VariantKernels kCurrent{"prologue_test_current", "hash-a", {}, false, 64,
                                       {{"decay", {"x"}, &hostForward, nullptr}}};
const runtime::VariantDeviceMaps kCurrentDevice{"prologue_test_current", "hash-a",
                                                {{"decay", &deviceForward, nullptr}}};
const runtime::VariantKernels kChanged{"prologue_test_changed", "hash-new", {}, false, 64,
                                       {{"decay", {"x"}, &hostForward, nullptr}}};
const runtime::VariantDeviceMaps kChangedDevice{"prologue_test_changed", "hash-old",
                                                {{"decay", &deviceForward, nullptr}}};
const runtime::Registration kRegisterCurrent(&kCurrent), kRegisterChanged(&kChanged);
const runtime::DeviceRegistration kRegisterCurrentDevice(&kCurrentDevice),
    kRegisterChangedDevice(&kChangedDevice);

TEST(DeviceRegistry, FindsTheDeviceMapOfTheSameSpecHashOnly) {
  const runtime::DeviceMap* found = runtime::Registry::findDevice(kCurrent.maps[0]);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found, &kCurrentDevice.maps[0]);
  // A variant replaced by one compiled on demand from a changed spec keeps no device maps.
  EXPECT_EQ(runtime::Registry::findDevice(kChanged.maps[0]), nullptr);
  // A map that belongs to no registered variant.
  const runtime::PrologueMap stray{"decay", {"x"}, &hostForward, nullptr};
  EXPECT_EQ(runtime::Registry::findDevice(stray), nullptr);
  static const runtime::VariantDeviceMaps duplicate = kCurrentDevice;
  EXPECT_THROW(runtime::Registry::addDevice(&duplicate), std::logic_error);
}

// `linac bench` asks for d_g only where training learns the decay.
TEST(Registry, LearnsTheDecayWhereItsMapReadsAnInputOrAParameter) {
  auto learns = [](const std::string& name) {
    const runtime::VariantKernels* v = runtime::Registry::find(name);
    EXPECT_NE(v, nullptr) << name;
    return v != nullptr && v->learnsDecay();
  };
  EXPECT_FALSE(learns("retnet"));    // log(1 - 2^(-5 - head)): the head index only
  EXPECT_FALSE(learns("deltanet"));  // no decay
  for (const char* name : {"gla", "rwkv6", "hgrn2", "mamba2", "gated_deltanet"}) EXPECT_TRUE(learns(name)) << name;
}

// linac-select-algorithm marks a decay with an exp factor (the generated kKind's preciseDecayGrad):
// the Hopper diagonal backward then takes Ks / Qs in two 16-bit halves.
TEST(Registry, MarksTheDecaysWithAnExpFactorForAPreciseGradient) {
  auto precise = [](const std::string& name) {
    const runtime::VariantKernels* v = runtime::Registry::find(name);
    EXPECT_NE(v, nullptr) << name;
    return v != nullptr && v->kind.preciseDecayGrad;
  };
  for (const char* name : {"rwkv6", "mamba2", "gated_deltanet"}) EXPECT_TRUE(precise(name)) << name;  // -exp(..) * ..
  for (const char* name : {"gla", "hgrn2", "retnet", "deltanet", "gated_delta_diag"})
    EXPECT_FALSE(precise(name)) << name;  // logsigmoid, log(f), constant, none
}

TEST(DeviceRegistry, EveryGeneratedVariantHasDeviceMapsExactlyInCudaBuilds) {
  for (const runtime::VariantKernels* v : runtime::Registry::all()) {
    if (v->name.rfind("prologue_test_", 0) == 0) continue;
    for (const runtime::PrologueMap& m : v->maps) {
      const runtime::DeviceMap* device = runtime::Registry::findDevice(m);
#ifdef LINAC_HAVE_CUDA
      ASSERT_NE(device, nullptr) << v->name << " " << m.role;
      EXPECT_EQ(device->partials != nullptr, m.partials != nullptr) << v->name << " " << m.role;
#else
      EXPECT_EQ(device, nullptr) << v->name << " " << m.role;
#endif
    }
  }
}

// --- applyMap -----------------------------------------------------------------------------------

const runtime::PrologueMap& gatedDeltaNetDecay() {
  const runtime::VariantKernels* v = runtime::Registry::find("gated_deltanet");
  if (!v || !v->find("decay")) throw std::runtime_error("gated_deltanet's decay is not linked in");
  return *v->find("decay");
}

TEST(ApplyMap, CpuMatchesTheSpecExpressionWithBroadcastGradients) {
  const runtime::PrologueMap& decay = gatedDeltaNetDecay();  // -exp(A_log) * softplus(a + dt_bias)
  torch::Tensor A_log = torch::rand({1, 1, 3, 1}, torch::requires_grad());
  torch::Tensor a = torch::randn({2, 4, 3, 1}, torch::requires_grad());
  torch::Tensor dt_bias = torch::rand({1, 1, 3, 1}, torch::requires_grad());
  torch::Tensor got = applyMap(decay, {A_log, a, dt_bias});
  torch::Tensor want = -torch::exp(A_log) * torch::softplus(a + dt_bias);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6));
  torch::Tensor weight = torch::randn(want.sizes());
  auto gotGrads = torch::autograd::grad({(got * weight).sum()}, {A_log, a, dt_bias});
  auto wantGrads = torch::autograd::grad({(want * weight).sum()}, {A_log, a, dt_bias});
  for (size_t i = 0; i < gotGrads.size(); ++i) {
    EXPECT_EQ(gotGrads[i].sizes(), wantGrads[i].sizes()) << i;
    EXPECT_TRUE(torch::allclose(gotGrads[i], wantGrads[i], 1e-4, 1e-5)) << i;
  }
}

TEST(ApplyMap, ConvertsOtherDtypesAndRejectsWrongOperandCounts) {
  const runtime::PrologueMap& decay = gatedDeltaNetDecay();
  torch::Tensor A_log = torch::rand({1, 1, 3, 1}, torch::kBFloat16);
  torch::Tensor a = torch::randn({2, 4, 3, 1}, torch::kFloat64);
  torch::Tensor got = applyMap(decay, {A_log, a, torch::zeros({})});
  EXPECT_EQ(got.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::allclose(got, -torch::exp(A_log.to(torch::kFloat32)) *
                                       torch::softplus(a.to(torch::kFloat32)), 1e-5, 1e-6));
  EXPECT_THROW(applyMap(decay, {A_log, a}), std::invalid_argument);
}

// --- device maps against the host loops (needs a GPU) ------------------------------------------

/// Operand j's shape: a full [B, T, H, D] field, a per-head parameter or a scalar, in turn.
std::vector<int64_t> operandShape(size_t j) {
  switch (j % 3) {
  case 0: return {2, 33, 3, 5};
  case 1: return {1, 1, 3, 1};
  default: return {};
  }
}

TEST(DeviceMaps, MatchTheHostLoopsForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const runtime::VariantKernels* v : runtime::Registry::all()) {
    if (v->name.rfind("prologue_test_", 0) == 0) continue;
    for (const runtime::PrologueMap& m : v->maps) {
      if (!runtime::Registry::findDevice(m)) continue;  // a build without CUDA
      SCOPED_TRACE(v->name + " " + m.role);
      std::vector<torch::Tensor> host, device;
      for (size_t j = 0; j < m.args.size(); ++j) {
        // Positive, away from 0: every spec's expressions are defined there. Operand 0 goes to
        // the device in bf16 (exactly representable: the host reads the same values).
        torch::Tensor x = (0.2 + 0.8 * torch::rand(operandShape(j), torch::kFloat64));
        if (j == 0) x = x.to(torch::kBFloat16).to(torch::kFloat64);
        host.push_back(x.to(torch::kFloat32).requires_grad_());
        torch::Tensor d = x.to(torch::kCUDA, j == 0 ? torch::kBFloat16 : torch::kFloat32);
        if (d.dim() == 4) d = d.transpose(1, 3).contiguous().transpose(1, 3);  // strided view
        device.push_back(d.requires_grad_());
      }
      torch::Tensor want = applyMap(m, host), got = applyMap(m, device);
      ASSERT_TRUE(got.is_cuda());
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(torch::allclose(got.cpu(), want, 1e-5, 1e-6, /*equal_nan=*/true));
      if (!m.partials) continue;
      torch::Tensor weight = torch::randn(want.sizes());
      auto wantGrads = torch::autograd::grad({(want * weight).sum()}, host);
      auto gotGrads = torch::autograd::grad({(got * weight.cuda()).sum()}, device);
      for (size_t j = 0; j < host.size(); ++j) {
        EXPECT_EQ(gotGrads[j].sizes(), device[j].sizes()) << m.args[j];
        EXPECT_EQ(gotGrads[j].scalar_type(), device[j].scalar_type()) << m.args[j];
        EXPECT_TRUE(torch::allclose(gotGrads[j].cpu().to(torch::kFloat32), wantGrads[j],
                                    j == 0 ? 1e-2 : 1e-4, 1e-4, /*equal_nan=*/true))
            << m.args[j];
      }
    }
  }
}

TEST(DeviceMaps, EmptyResultsAndCpuScalarOperands) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const runtime::PrologueMap& decay = gatedDeltaNetDecay();
  torch::Tensor A_log = torch::rand({1, 1, 3, 1}, torch::kCUDA).requires_grad_();
  torch::Tensor a = torch::randn({0, 4, 3, 1}, torch::kCUDA).requires_grad_();
  torch::Tensor got = applyMap(decay, {A_log, a, torch::zeros({})});  // dt_bias stays on the CPU
  EXPECT_TRUE(got.is_cuda());
  EXPECT_EQ(got.numel(), 0);
  auto grads = torch::autograd::grad({got.sum()}, {A_log, a});
  EXPECT_TRUE(torch::equal(grads[0].cpu(), torch::zeros({1, 1, 3, 1})));
  EXPECT_EQ(grads[1].sizes(), a.sizes());
}

}  // namespace
}  // namespace linac::prologue
