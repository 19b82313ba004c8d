#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_kernels.h"
#include "oracle/oracle.h"

namespace linac::test {

namespace {

std::mutex g_errors_mutex;
std::map<std::string, double>& maxErrors() {
  static std::map<std::string, double> errors;
  return errors;
}

/// Prints the largest error seen per dtype and tensor when the test program ends.
class ErrorSummary : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard<std::mutex> lock(g_errors_mutex);
    std::printf("[ summary  ] max relative RMS error vs the float64 oracle:\n");
    for (const auto& [name, error] : maxErrors()) std::printf("    %-12s %.3e\n", name.c_str(), error);
  }
};
const auto* const g_summary = ::testing::AddGlobalTestEnvironment(new ErrorSummary);

torch::Tensor gradOrUndefined(const torch::Tensor& t) {
  return t.defined() && t.grad().defined() ? t.grad() : torch::Tensor();
}

torch::Tensor asDouble(const torch::Tensor& t) { return t.defined() ? t.to(torch::kDouble) : t; }

}  // namespace

uint32_t freshSeed() { return std::random_device{}(); }

std::string kindName(const RecurrenceKind& kind) {
  static const char* decays[] = {"none", "fixed", "scalar", "diagonal"};
  return std::string(decays[int(kind.decay)]) +
         (kind.update == UpdateRule::Delta ? "_delta" : "_additive") +
         (kind.readout == Readout::Inclusive ? "_inclusive" : "_bonus");
}

std::string dtypeName(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
  }
  return "?";
}

torch::ScalarType torchType(DType dtype) {
  switch (dtype) {
    case DType::F32: return torch::kFloat;
    case DType::BF16: return torch::kBFloat16;
    case DType::F16: return torch::kHalf;
  }
  return torch::kFloat;
}

std::vector<RecurrenceKind> allKinds() {
  std::vector<RecurrenceKind> kinds;
  for (DecayClass decay : {DecayClass::None, DecayClass::Fixed, DecayClass::Scalar, DecayClass::Diagonal})
    for (UpdateRule update : {UpdateRule::Additive, UpdateRule::Delta})
      for (Readout readout : {Readout::Inclusive, Readout::ExclusiveBonus})
        kinds.push_back({decay, update, readout});
  return kinds;
}

RecurrenceData makeRecurrenceData(const RecurrenceCase& c, uint32_t seed) {
  torch::manual_seed(seed);
  const int64_t B = c.batch, T = c.seq_len, H = c.heads, dk = c.key_dim, dv = c.value_dim;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  const torch::ScalarType io = torchType(c.dtype);
  RecurrenceData d;
  torch::Tensor q = torch::randn({B, T, H, dk}, f32), k = torch::randn({B, T, H, dk}, f32);
  if (c.kind.update == UpdateRule::Delta) {  // DeltaNet L2-normalises q and k
    q = q / q.norm(2, -1, true);
    k = k / k.norm(2, -1, true);
    d.scale = 1.0 / std::sqrt(double(dk));
  } else {
    k = k / std::sqrt(double(dk));
    d.scale = 1.0 / std::sqrt(double(dk));
  }
  d.q = q.to(io);
  d.k = k.to(io);
  d.v = torch::randn({B, T, H, dv}, f32).to(io);
  auto logDecay = [&](at::IntArrayRef shape) {
    return torch::clamp_min(torch::log_sigmoid(torch::randn(shape, f32)) * c.decay_strength,
                            c.min_log_decay);
  };
  switch (c.kind.decay) {
    case DecayClass::None: break;
    case DecayClass::Fixed: d.g = logDecay({H}); break;
    case DecayClass::Scalar: d.g = logDecay({B, T, H}); break;
    case DecayClass::Diagonal: d.g = logDecay({B, T, H, dk}); break;
  }
  if (c.kind.update == UpdateRule::Delta) d.beta = torch::sigmoid(torch::randn({B, T, H}, f32));
  if (c.kind.readout == Readout::ExclusiveBonus) d.u = 0.5 * torch::randn({H, dk}, f32);
  if (c.with_h0) d.h0 = 0.5 * torch::randn({c.numSeqs(), H, dk, dv}, f32);
  d.d_o = torch::randn({B, T, H, dv}, f32).to(io);
  if (c.with_d_ht) d.d_ht = torch::randn({c.numSeqs(), H, dk, dv}, f32);
  return d;
}

namespace {

kernels::RecurrenceShape shapeOf(const RecurrenceCase& c) {
  kernels::RecurrenceShape shape;
  shape.batch = c.batch;
  shape.seq_len = c.seq_len;
  shape.heads = c.heads;
  shape.key_dim = c.key_dim;
  shape.value_dim = c.value_dim;
  if (!c.cu_seqlens.empty()) shape.cu_seqlens = c.cu_seqlens.data();
  shape.num_seqs = c.numSeqs();
  return shape;
}

template <typename T>
const T* ptrOrNull(const torch::Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

kernels::RecurrenceForwardArgs forwardArgs(const RecurrenceData& d) {
  kernels::RecurrenceForwardArgs args;
  args.q = d.q.data_ptr();
  args.k = d.k.data_ptr();
  args.v = d.v.data_ptr();
  args.g = ptrOrNull<float>(d.g);
  args.beta = ptrOrNull<float>(d.beta);
  args.u = ptrOrNull<float>(d.u);
  args.h0 = ptrOrNull<float>(d.h0);
  args.scale = float(d.scale);
  return args;
}

}  // namespace

RecurrenceResult runCpuForward(const RecurrenceCase& c, const RecurrenceData& d) {
  const kernels::RecurrenceShape shape = shapeOf(c);
  torch::Tensor o = torch::empty({c.batch, c.seq_len, c.heads, c.value_dim}, d.v.options());
  torch::Tensor ht = torch::empty({c.numSeqs(), c.heads, c.key_dim, c.value_dim}, torch::kFloat);
  kernels::RecurrenceForwardArgs args = forwardArgs(d);
  args.o = o.data_ptr();
  args.ht = ht.data_ptr<float>();
  kernels::cpu::chunkForward(c.kind, shape, args, c.dtype, c.chunk);
  RecurrenceResult r;
  r.o = asDouble(o);
  r.ht = asDouble(ht);
  return r;
}

RecurrenceResult runCpuKernels(const RecurrenceCase& c, const RecurrenceData& d) {
  RecurrenceResult r = runCpuForward(c, d);
  const kernels::RecurrenceShape shape = shapeOf(c);
  kernels::RecurrenceBackwardArgs args;
  args.fwd = forwardArgs(d);
  args.d_o = d.d_o.data_ptr();
  args.d_ht = ptrOrNull<float>(d.d_ht);
  torch::Tensor dq = torch::empty_like(d.q), dk = torch::empty_like(d.k), dv = torch::empty_like(d.v);
  torch::Tensor dh0 = torch::empty({c.numSeqs(), c.heads, c.key_dim, c.value_dim}, torch::kFloat);
  torch::Tensor dg = d.g.defined() ? torch::empty_like(d.g) : torch::Tensor();
  torch::Tensor dbeta = d.beta.defined() ? torch::empty_like(d.beta) : torch::Tensor();
  torch::Tensor du = d.u.defined() ? torch::empty_like(d.u) : torch::Tensor();
  args.d_q = dq.data_ptr();
  args.d_k = dk.data_ptr();
  args.d_v = dv.data_ptr();
  args.d_h0 = dh0.data_ptr<float>();
  args.d_g = dg.defined() ? dg.data_ptr<float>() : nullptr;
  args.d_beta = dbeta.defined() ? dbeta.data_ptr<float>() : nullptr;
  args.d_u = du.defined() ? du.data_ptr<float>() : nullptr;
  kernels::cpu::chunkBackward(c.kind, shape, args, c.dtype, c.chunk);
  r.dq = asDouble(dq);
  r.dk = asDouble(dk);
  r.dv = asDouble(dv);
  r.dg = asDouble(dg);
  r.dbeta = asDouble(dbeta);
  r.du = asDouble(du);
  r.dh0 = asDouble(dh0);
  return r;
}

RecurrenceResult runOracle(const RecurrenceCase& c, const RecurrenceData& d) {
  auto leaf = [](const torch::Tensor& t) {
    return t.defined() ? t.to(torch::kDouble).detach().requires_grad_(true) : torch::Tensor();
  };
  oracle::RecurrenceInputs in;
  in.q = leaf(d.q);
  in.k = leaf(d.k);
  in.v = leaf(d.v);
  in.g = leaf(d.g);
  in.beta = leaf(d.beta);
  in.u = leaf(d.u);
  // The kernels treat a null h0 as zeros and still return d_h0: give the oracle explicit zeros.
  in.h0 = leaf(d.h0.defined() ? d.h0
                              : torch::zeros({c.numSeqs(), c.heads, c.key_dim, c.value_dim}));
  in.scale = float(d.scale);  // the kernels receive the scale as fp32
  in.cu_seqlens = c.cu_seqlens;
  const oracle::RecurrenceOutputs out = oracle::recurrence(c.kind, in);
  torch::Tensor loss = (out.o * d.d_o.to(torch::kDouble)).sum();
  if (d.d_ht.defined()) loss = loss + (out.ht * d.d_ht.to(torch::kDouble)).sum();
  loss.backward();
  RecurrenceResult r;
  r.o = out.o.detach();
  r.ht = out.ht.detach();
  r.dq = gradOrUndefined(in.q);
  r.dk = gradOrUndefined(in.k);
  r.dv = gradOrUndefined(in.v);
  r.dg = gradOrUndefined(in.g);
  r.dbeta = gradOrUndefined(in.beta);
  r.du = gradOrUndefined(in.u);
  r.dh0 = gradOrUndefined(in.h0);
  return r;
}

double relRms(const torch::Tensor& x, const torch::Tensor& ref) {
  const double ref_norm = ref.norm().item<double>();
  const double diff = (x.to(torch::kDouble) - ref).norm().item<double>();
  return ref_norm > 0 ? diff / ref_norm : diff;
}

void recordError(DType dtype, const std::string& tensor, double error) {
  std::lock_guard<std::mutex> lock(g_errors_mutex);
  double& slot = maxErrors()[dtypeName(dtype) + " " + tensor];
  if (!(error <= slot)) slot = error;  // NaN sticks
}

void expectClose(const RecurrenceResult& got, const RecurrenceResult& ref, double tol, DType dtype) {
  const std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>> pairs[] = {
      {"o", {got.o, ref.o}},       {"ht", {got.ht, ref.ht}},       {"dq", {got.dq, ref.dq}},
      {"dk", {got.dk, ref.dk}},    {"dv", {got.dv, ref.dv}},       {"dg", {got.dg, ref.dg}},
      {"dbeta", {got.dbeta, ref.dbeta}}, {"du", {got.du, ref.du}}, {"dh0", {got.dh0, ref.dh0}}};
  for (const auto& [name, tensors] : pairs) {
    const auto& [x, r] = tensors;
    if (!r.defined()) continue;
    ASSERT_TRUE(x.defined()) << name << " missing from the kernel result";
    ASSERT_EQ(x.sizes(), r.sizes()) << name;
    const double error = relRms(x, r);
    recordError(dtype, name, error);
    EXPECT_TRUE(torch::isfinite(x).all().item<bool>()) << name << " has inf/NaN";
    // The fixed class's dg ([H]) is one total per head over every token, row and column, far
    // smaller than the sum of its terms' sizes: the fp32 states' rounding is amplified by that
    // cancellation (measured up to 1.2e-5), so it gets the conditioned tolerance.
    const bool fixedDecayGrad = std::string(name) == "dg" && r.dim() == 1;
    const double limit = fixedDecayGrad ? std::max(tol, kFixedDecayGradTol) : tol;
    EXPECT_LT(error, limit) << name << " relative RMS error";
  }
}

}  // namespace linac::test
