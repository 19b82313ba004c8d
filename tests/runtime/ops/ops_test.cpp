// linac::ops (runtime/ops/recurrence_ops.h) vs the float64 oracle: forward and torch-autograd
// backward of the chunkwise recurrence for a representative set of kinds in fp32 and bf16, packed
// varlen, dtype / layout handling, the decode step, the HGRN scan, and every validation error.
// Inputs are fresh random each run (seed printed on failure); the CPU kernels underneath are
// tested exhaustively in tests/runtime/kernels.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "oracle/oracle.h"
#include "ops/padding.h"
#include "ops/recurrence_ops.h"
#include "test_util.h"

#ifdef LINAC_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "kernels/cuda/workspace.h"
#endif

namespace linac::test {
namespace {

torch::Tensor leaf(const torch::Tensor& t) {
  return t.defined() ? t.detach().clone().requires_grad_(true) : t;
}
torch::Tensor gradOf(const torch::Tensor& t) {
  return t.defined() && t.grad().defined() ? t.grad().to(torch::kDouble) : torch::Tensor();
}
torch::Tensor asDouble(const torch::Tensor& t) {
  return t.defined() ? t.detach().to(torch::kDouble) : t;
}
torch::Tensor cuTensor(const std::vector<int64_t>& cu) {
  return cu.empty() ? torch::Tensor() : torch::tensor(cu, torch::kLong);
}

ops::RecurrenceOptions optionsFor(const RecurrenceCase& c, const RecurrenceData& d) {
  ops::RecurrenceOptions options;
  options.kind = c.kind;
  options.scale = float(d.scale);  // the oracle helper feeds the fp32-rounded scale
  options.chunk = c.chunk;
  options.outputFinalState = c.with_d_ht;
  return options;
}

/// ops::recurrence forward + autograd backward of <o, d_o> + <ht, d_ht>, results in float64.
RecurrenceResult runOps(const RecurrenceCase& c, const RecurrenceData& d) {
  ops::RecurrenceInputs in{leaf(d.q),    leaf(d.k), leaf(d.v),  leaf(d.g),
                           leaf(d.beta), leaf(d.u), leaf(d.h0), cuTensor(c.cu_seqlens)};
  const auto [o, ht] = ops::recurrence(in, optionsFor(c, d));
  EXPECT_EQ(o.scalar_type(), d.q.scalar_type());
  EXPECT_EQ(ht.defined(), c.with_d_ht);
  torch::Tensor loss = (o.to(torch::kDouble) * d.d_o.to(torch::kDouble)).sum();
  if (c.with_d_ht) loss = loss + (ht.to(torch::kDouble) * d.d_ht.to(torch::kDouble)).sum();
  loss.backward();
  for (const torch::Tensor* t : {&in.q, &in.k, &in.v, &in.g, &in.beta, &in.u, &in.h0}) {
    if (t->defined()) EXPECT_EQ(t->grad().scalar_type(), t->scalar_type());
  }
  return {asDouble(o),  asDouble(ht),    gradOf(in.q), gradOf(in.k), gradOf(in.v),
          gradOf(in.g), gradOf(in.beta), gradOf(in.u), gradOf(in.h0)};
}

/// The oracle's results, restricted to what the op returns for this case.
RecurrenceResult runReference(const RecurrenceCase& c, const RecurrenceData& d) {
  RecurrenceResult ref = runOracle(c, d);
  if (!c.with_d_ht) ref.ht = torch::Tensor();
  if (!c.with_h0) ref.dh0 = torch::Tensor();
  return ref;
}

RecurrenceCase smallCase(const RecurrenceKind& kind, DType dtype) {
  RecurrenceCase c;
  c.kind = kind;
  c.dtype = dtype;
  c.batch = 2;
  c.seq_len = 70;  // not a multiple of the chunk
  c.heads = 2;
  c.key_dim = 32;
  c.value_dim = 24;
  c.chunk = 32;
  return c;
}

const RecurrenceKind kKinds[] = {
    {DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive},
    {DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive},
    {DecayClass::Diagonal, UpdateRule::Additive, Readout::ExclusiveBonus},
    {DecayClass::None, UpdateRule::Delta, Readout::Inclusive},
    {DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive},
    {DecayClass::Diagonal, UpdateRule::Delta, Readout::Inclusive},
};

class OpsVsOracle : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(OpsVsOracle, ForwardAndBackward) {
  const RecurrenceCase c = smallCase(kKinds[std::get<0>(GetParam())], std::get<1>(GetParam()));
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", kind " + kindName(c.kind));
  const RecurrenceData d = makeRecurrenceData(c, seed);
  expectClose(runOps(c, d), runReference(c, d), toleranceFor(c.dtype), c.dtype);
}

// Zero-padded head dims (what CUDA tensors with dk = 32 or dv = 24 run): outputs and every
// gradient equal the unpadded recurrence's (the oracle), for every kind.
TEST_P(OpsVsOracle, ZeroPaddedHeadDimsAreExact) {
  const RecurrenceCase c = smallCase(kKinds[std::get<0>(GetParam())], std::get<1>(GetParam()));
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", kind " + kindName(c.kind));
  const RecurrenceData d = makeRecurrenceData(c, seed);
  const auto [dk, dv] = ops::cudaChunkDims(c.key_dim, c.value_dim);
  ASSERT_EQ(dk, 64);
  ASSERT_EQ(dv, 64);
  ops::RecurrenceInputs in{leaf(d.q),    leaf(d.k), leaf(d.v),  leaf(d.g),
                           leaf(d.beta), leaf(d.u), leaf(d.h0), cuTensor(c.cu_seqlens)};
  const auto [o, ht] = ops::recurrencePadded(in, optionsFor(c, d), dk, dv);
  ASSERT_EQ(o.sizes(), d.d_o.sizes());
  ASSERT_EQ(ht.sizes(), d.d_ht.sizes());
  ((o.to(torch::kDouble) * d.d_o.to(torch::kDouble)).sum() +
   (ht.to(torch::kDouble) * d.d_ht.to(torch::kDouble)).sum())
      .backward();
  const RecurrenceResult padded{asDouble(o),  asDouble(ht),    gradOf(in.q), gradOf(in.k), gradOf(in.v),
                                gradOf(in.g), gradOf(in.beta), gradOf(in.u), gradOf(in.h0)};
  expectClose(padded, runReference(c, d), toleranceFor(c.dtype), c.dtype);
}

TEST(Ops, CudaChunkDims) {
  EXPECT_EQ(ops::cudaChunkDims(32, 24), std::make_pair(int64_t(64), int64_t(64)));
  EXPECT_EQ(ops::cudaChunkDims(64, 64), std::make_pair(int64_t(64), int64_t(64)));
  EXPECT_EQ(ops::cudaChunkDims(100, 130), std::make_pair(int64_t(128), int64_t(192)));
  EXPECT_EQ(ops::cudaChunkDims(256, 512), std::make_pair(int64_t(256), int64_t(512)));
  EXPECT_EQ(ops::cudaChunkDims(384, 64).first, 384);  // above 256: the kernels reject it
}

// torch's deterministic mode on CUDA (label gpu): a backward path that sums with float atomics
// raises torch's not-deterministic error naming it (the exact per-token kernel, for the delta rule
// with a diagonal decay); the paths that write every gradient once in a fixed order run, and twice
// give the same bits (the delta rule's mma.sync path at fp32, a bf16 Mamba-2).
#ifdef LINAC_HAVE_CUDA
// The kernels' scratch memory is torch's (kernels/cuda/workspace.h, installed by
// ops/kernel_dispatch.cpp): it counts in torch's statistics while alive and returns to torch's
// pool after, so an out-of-memory there is torch's error and torch's peak includes it.
TEST(OpsCuda, KernelWorkspacesComeFromTorchsAllocator) {
  ASSERT_TRUE(torch::cuda::is_available()) << "OpsCuda needs a GPU";
  const torch::Tensor warm = torch::zeros({1}, torch::kCUDA);  // torch's allocator is set up
  const auto device = warm.device().index();
  auto allocated = [device] {
    using c10::CachingAllocator::StatType;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    return stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
  };
  const int64_t before = allocated();
  constexpr size_t kBytes = size_t(64) << 20;
  {
    const kernels::cuda::Workspace workspace(kBytes, at::cuda::getCurrentCUDAStream(device).stream());
    EXPECT_NE(workspace.data(), nullptr);
    EXPECT_GE(allocated() - before, int64_t(kBytes));
  }
  EXPECT_EQ(allocated(), before);
}
#endif

TEST(OpsCuda, DeterministicModeNamesTheAtomicPath) {
  ASSERT_TRUE(torch::cuda::is_available()) << "OpsCuda needs a GPU";
  struct Restore {
    ~Restore() { at::globalContext().setDeterministicAlgorithms(false, false); }
  } restore;
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  using kernels::DecayClass, kernels::UpdateRule, kernels::Readout;
  // q, k, v, g, beta gradients of sum(o) for B1 T100 H2 dk = dv = 64.
  auto gradients = [](const kernels::RecurrenceKind& kind, torch::ScalarType dtype) {
    torch::manual_seed(3);
    const auto cuda = torch::TensorOptions().device(torch::kCUDA);
    const int64_t B = 1, T = 100, H = 2, D = 64;
    torch::Tensor kRaw = torch::randn({B, T, H, D}, cuda);
    torch::Tensor q = torch::randn({B, T, H, D}, cuda).to(dtype).requires_grad_(true);
    torch::Tensor k = (kRaw / kRaw.norm(2, -1, true)).to(dtype).requires_grad_(true);
    torch::Tensor v = torch::randn({B, T, H, D}, cuda).to(dtype).requires_grad_(true);
    torch::Tensor g = kind.decay == DecayClass::Scalar     ? (-torch::rand({B, T, H}, cuda)).requires_grad_(true)
                      : kind.decay == DecayClass::Diagonal ? (-torch::rand({B, T, H, D}, cuda)).requires_grad_(true)
                                                           : torch::Tensor();
    torch::Tensor beta = kind.update == UpdateRule::Delta ? torch::rand({B, T, H}, cuda).requires_grad_(true)
                                                          : torch::Tensor();
    ops::RecurrenceOptions options{kind, 0.125, 64, false};
    ops::recurrence({q, k, v, g, beta, {}, {}, {}}, options).first.to(torch::kFloat).sum().backward();
    return std::vector<torch::Tensor>{q.grad(), k.grad(), v.grad(), g.grad()};  // g is defined in every case here
  };
  auto refusal = [&](const kernels::RecurrenceKind& kind, torch::ScalarType dtype) -> std::string {
    try {
      gradients(kind, dtype);
    } catch (const c10::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refusal({DecayClass::Diagonal, UpdateRule::Delta, Readout::Inclusive}, torch::kFloat).find("exact per-token"),
            std::string::npos);
  const kernels::RecurrenceKind delta{DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive};
  const kernels::RecurrenceKind mamba{DecayClass::Scalar, UpdateRule::Additive, Readout::Inclusive};
  for (const auto& [kind, dtype] : {std::pair{delta, torch::kFloat}, std::pair{mamba, torch::kBFloat16}}) {
    EXPECT_EQ(refusal(kind, dtype), "") << "update " << int(kind.update);
    const auto first = gradients(kind, dtype), second = gradients(kind, dtype);
    for (size_t i = 0; i < first.size(); ++i)
      EXPECT_TRUE(torch::equal(first[i], second[i])) << "update " << int(kind.update) << ", gradient " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, OpsVsOracle,
                         ::testing::Combine(::testing::Range(0, 6),
                                            ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& info) {
                           return kindName(kKinds[std::get<0>(info.param)]) + "_" +
                                  dtypeName(std::get<1>(info.param));
                         });

TEST(Ops, VarlenWithInitialAndFinalState) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    RecurrenceCase c =
        smallCase({DecayClass::Diagonal, UpdateRule::Delta, Readout::ExclusiveBonus}, dtype);
    c.batch = 1;
    c.cu_seqlens = {0, 17, 50, 70};
    const uint32_t seed = freshSeed();
    SCOPED_TRACE("seed " + std::to_string(seed) + ", " + dtypeName(dtype));
    const RecurrenceData d = makeRecurrenceData(c, seed);
    expectClose(runOps(c, d), runReference(c, d), toleranceFor(c.dtype), c.dtype);
  }
}

TEST(Ops, NoInitialStateNoFinalState) {
  RecurrenceCase c =
      smallCase({DecayClass::Scalar, UpdateRule::Delta, Readout::ExclusiveBonus}, DType::F32);
  c.with_h0 = false;
  c.with_d_ht = false;
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const RecurrenceData d = makeRecurrenceData(c, seed);
  expectClose(runOps(c, d), runReference(c, d), kTolF32, c.dtype);
}

// Only v requires grad: the other gradients are not computed (null kernel pointers), v's is right.
TEST(Ops, OnlyRequestedGradients) {
  const RecurrenceCase c =
      smallCase({DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive}, DType::F32);
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const RecurrenceData d = makeRecurrenceData(c, seed);
  ops::RecurrenceInputs in{d.q, d.k, leaf(d.v), d.g, d.beta, {}, d.h0, {}};
  const auto [o, ht] = ops::recurrence(in, optionsFor(c, d));
  ((o.to(torch::kDouble) * d.d_o.to(torch::kDouble)).sum() +
   (ht.to(torch::kDouble) * d.d_ht.to(torch::kDouble)).sum())
      .backward();
  const RecurrenceResult ref = runReference(c, d);
  const double error = relRms(in.v.grad(), ref.dv);
  recordError(c.dtype, "dv", error);
  EXPECT_LT(error, kTolF32);
}

// Only ht enters the loss: o receives no gradient (d_o undefined, treated as zeros).
TEST(Ops, OnlyFinalStateUsed) {
  const RecurrenceCase c =
      smallCase({DecayClass::Diagonal, UpdateRule::Additive, Readout::Inclusive}, DType::F32);
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  RecurrenceData d = makeRecurrenceData(c, seed);
  d.d_o = torch::zeros_like(d.d_o);
  ops::RecurrenceInputs in{leaf(d.q), leaf(d.k), leaf(d.v), leaf(d.g), {}, {}, leaf(d.h0), {}};
  const auto [o, ht] = ops::recurrence(in, optionsFor(c, d));
  (ht.to(torch::kDouble) * d.d_ht.to(torch::kDouble)).sum().backward();
  const RecurrenceResult got{{},           {},           gradOf(in.q), gradOf(in.k), gradOf(in.v),
                             gradOf(in.g), {},           {},           gradOf(in.h0)};
  RecurrenceResult ref = runReference(c, d);
  ref.o = ref.ht = torch::Tensor();
  ref.dq = torch::Tensor();  // exactly zero: relRms would compare absolute values
  EXPECT_EQ(in.q.grad().abs().max().item<float>(), 0.0f);
  expectClose(got, ref, kTolF32, c.dtype);
}

// g and beta in float64, q / k / v non-contiguous views: same results, gradients in the input
// dtypes and shapes.
TEST(Ops, DtypeAndLayoutConversions) {
  const RecurrenceCase c =
      smallCase({DecayClass::Diagonal, UpdateRule::Delta, Readout::Inclusive}, DType::F32);
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const RecurrenceData d = makeRecurrenceData(c, seed);
  auto strided = [](const torch::Tensor& t) {  // same values, [B, T, H, D] view of [B, H, T, D]
    return t.transpose(1, 2).contiguous().transpose(1, 2).detach().requires_grad_(true);
  };
  ops::RecurrenceInputs in{strided(d.q),
                           strided(d.k),
                           strided(d.v),
                           leaf(d.g.to(torch::kDouble)),
                           leaf(d.beta.to(torch::kDouble)),
                           {},
                           leaf(d.h0),
                           {}};
  ASSERT_FALSE(in.q.is_contiguous());
  const auto [o, ht] = ops::recurrence(in, optionsFor(c, d));
  ((o.to(torch::kDouble) * d.d_o.to(torch::kDouble)).sum() +
   (ht.to(torch::kDouble) * d.d_ht.to(torch::kDouble)).sum())
      .backward();
  EXPECT_EQ(in.g.grad().scalar_type(), torch::kDouble);
  EXPECT_EQ(in.beta.grad().scalar_type(), torch::kDouble);
  const RecurrenceResult got{asDouble(o),     asDouble(ht), gradOf(in.q),
                             gradOf(in.k),    gradOf(in.v), gradOf(in.g),
                             gradOf(in.beta), {},           gradOf(in.h0)};
  expectClose(got, runReference(c, d), kTolF32, c.dtype);
}

// T decode steps from h0 reproduce the oracle's outputs and final state.
TEST(Ops, RecurrenceStepMatchesOracle) {
  for (const RecurrenceKind& kind :
       {RecurrenceKind{DecayClass::Fixed, UpdateRule::Additive, Readout::Inclusive},
        RecurrenceKind{DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive},
        RecurrenceKind{DecayClass::Diagonal, UpdateRule::Delta, Readout::ExclusiveBonus}}) {
    RecurrenceCase c = smallCase(kind, DType::F32);
    c.seq_len = 12;
    const uint32_t seed = freshSeed();
    SCOPED_TRACE("seed " + std::to_string(seed) + ", kind " + kindName(kind));
    const RecurrenceData d = makeRecurrenceData(c, seed);
    ops::RecurrenceOptions options = optionsFor(c, d);
    torch::Tensor state = d.h0.clone();  // [B, H, dk, dv]
    std::vector<torch::Tensor> outputs;
    for (int64_t t = 0; t < c.seq_len; ++t) {
      ops::RecurrenceInputs step;
      step.q = d.q.select(1, t);  // [B, H, dk], a strided view
      step.k = d.k.select(1, t);
      step.v = d.v.select(1, t);
      if (kind.decay == DecayClass::Fixed) step.g = d.g;
      if (kind.decay == DecayClass::Scalar || kind.decay == DecayClass::Diagonal)
        step.g = d.g.select(1, t);
      if (d.beta.defined()) step.beta = d.beta.select(1, t);
      step.u = d.u;
      outputs.push_back(ops::recurrenceStep(step, state, options));
    }
    const RecurrenceResult ref = runReference(c, d);
    RecurrenceResult got;
    got.o = torch::stack(outputs, 1).to(torch::kDouble);
    got.ht = state.to(torch::kDouble);
    expectClose(got, RecurrenceResult{ref.o, ref.ht}, kTolF32, c.dtype);
  }
}

void checkScan(DType dtype, const std::vector<int64_t>& cu_seqlens) {
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", scan " + dtypeName(dtype));
  torch::manual_seed(seed);
  const int64_t B = cu_seqlens.empty() ? 2 : 1, T = 50, D = 24;
  const int64_t N = cu_seqlens.empty() ? B : int64_t(cu_seqlens.size()) - 1;
  const torch::Tensor x0 = torch::randn({B, T, D}).to(torchType(dtype));
  const torch::Tensor g0 = torch::log_sigmoid(torch::randn({B, T, D}));
  const torch::Tensor h00 = torch::randn({N, D});
  const torch::Tensor d_h = torch::randn({B, T, D}).to(torchType(dtype)).to(torch::kDouble);
  const torch::Tensor d_ht = torch::randn({N, D}, torch::kDouble);

  const torch::Tensor x = leaf(x0), g = leaf(g0), h0 = leaf(h00);
  const auto [h, ht] = ops::scan(x, g, h0, cuTensor(cu_seqlens), true);
  EXPECT_EQ(h.scalar_type(), x.scalar_type());
  ((h.to(torch::kDouble) * d_h).sum() + (ht.to(torch::kDouble) * d_ht).sum()).backward();

  const torch::Tensor rx = leaf(x0.to(torch::kDouble)), rg = leaf(g0.to(torch::kDouble)),
                      rh0 = leaf(h00.to(torch::kDouble));
  const oracle::ScanOutputs ref = oracle::scan(rx, rg, rh0, cu_seqlens);
  ((ref.h * d_h).sum() + (ref.ht * d_ht).sum()).backward();
  const double tol = toleranceFor(dtype);
  const std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>> pairs[] = {
      {"scan h", {h, ref.h}},
      {"scan ht", {ht, ref.ht}},
      {"scan dx", {x.grad(), rx.grad()}},
      {"scan dg", {g.grad(), rg.grad()}},
      {"scan dh0", {h0.grad(), rh0.grad()}}};
  for (const auto& [name, tensors] : pairs) {
    ASSERT_TRUE(tensors.first.defined()) << name;
    const double error = relRms(tensors.first.detach(), tensors.second.detach());
    recordError(dtype, name, error);
    EXPECT_LT(error, tol) << name;
  }
}

TEST(Ops, Scan) {
  checkScan(DType::F32, {});
  checkScan(DType::BF16, {});
  checkScan(DType::F32, {0, 20, 50});
}

// --- validation --------------------------------------------------------------------------------

/// Runs `call`, expecting std::invalid_argument whose message names 'arg' (and `detail`).
void expectInvalid(const std::function<void()>& call, const std::string& arg,
                   const std::string& detail = "") {
  try {
    call();
    ADD_FAILURE() << "no exception; expected std::invalid_argument naming '" << arg << "'";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'" + arg + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("expected"), std::string::npos) << message;
    EXPECT_NE(message.find(detail), std::string::npos) << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for '" << arg << "': " << e.what();
  }
}

struct ValidInputs {
  ops::RecurrenceInputs in;
  ops::RecurrenceOptions options;
};

/// Valid inputs for `kind`: B=2, T=8, H=2, dk=4, dv=3, with h0.
ValidInputs validInputs(const RecurrenceKind& kind) {
  const int64_t B = 2, T = 8, H = 2, dk = 4, dv = 3;
  ValidInputs v;
  v.options.kind = kind;
  v.options.chunk = 4;
  v.in.q = torch::randn({B, T, H, dk});
  v.in.k = torch::randn({B, T, H, dk});
  v.in.v = torch::randn({B, T, H, dv});
  switch (kind.decay) {
    case DecayClass::None:
      break;
    case DecayClass::Fixed:
      v.in.g = -torch::rand({H});
      break;
    case DecayClass::Scalar:
      v.in.g = -torch::rand({B, T, H});
      break;
    case DecayClass::Diagonal:
      v.in.g = -torch::rand({B, T, H, dk});
      break;
  }
  if (kind.update == UpdateRule::Delta) v.in.beta = torch::rand({B, T, H});
  if (kind.readout == Readout::ExclusiveBonus) v.in.u = torch::randn({H, dk});
  v.in.h0 = torch::zeros({B, H, dk, dv});
  return v;
}

TEST(OpsValidation, Recurrence) {
  const RecurrenceKind scalar_delta{DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive};
  const RecurrenceKind none_bonus{DecayClass::None, UpdateRule::Additive, Readout::ExclusiveBonus};
  ASSERT_NO_THROW(ops::recurrence(validInputs(scalar_delta).in, validInputs(scalar_delta).options));
  ASSERT_NO_THROW(ops::recurrence(validInputs(none_bonus).in, validInputs(none_bonus).options));

  using Mutate = std::function<void(ValidInputs&)>;
  struct Case {
    RecurrenceKind kind;
    Mutate mutate;
    std::string arg, detail;
  };
  const Case cases[] = {
      {scalar_delta, [](ValidInputs& v) { v.in.q = v.in.q.to(torch::kDouble); }, "q", "Double"},
      {scalar_delta, [](ValidInputs& v) { v.in.q = v.in.q.to(torch::kInt); }, "q", "Int"},
      {scalar_delta, [](ValidInputs& v) { v.in.q = torch::Tensor(); }, "q", "undefined"},
      {scalar_delta, [](ValidInputs& v) { v.in.q = v.in.q[0]; }, "q", "4 dimensions"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.q = torch::empty({2, 8, 2, 4}, torch::Device("meta"));
       },
       "q", "meta"},
      {scalar_delta, [](ValidInputs& v) { v.in.k = v.in.k.to(torch::kBFloat16); }, "k", "BFloat16"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.k = torch::randn({2, 8, 3, 4});
       },
       "k", "[2, 8, 3, 4]"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.v = torch::randn({2, 8, 3, 3});
       },
       "v", "[2, 8, 2, 3]"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.v = torch::empty({2, 8, 2, 3}, torch::Device("meta"));
       },
       "v", "meta"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.g = torch::rand({2, 8, 2, 4});
       },
       "g", "decay class scalar"},
      {scalar_delta, [](ValidInputs& v) { v.in.g = torch::Tensor(); }, "g", "decay class scalar"},
      {scalar_delta, [](ValidInputs& v) { v.in.g = v.in.g.to(torch::kInt); }, "g", "floating"},
      {none_bonus, [](ValidInputs& v) { v.in.g = torch::zeros({2}); }, "g", "decay class none"},
      {scalar_delta, [](ValidInputs& v) { v.in.beta = torch::Tensor(); }, "beta", "delta"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.beta = torch::rand({2, 8});
       },
       "beta", "[2, 8, 2]"},
      {none_bonus,
       [](ValidInputs& v) {
         v.in.beta = torch::rand({2, 8, 2});
       },
       "beta", "additive"},
      {none_bonus,
       [](ValidInputs& v) {
         v.in.u = torch::randn({2, 3});
       },
       "u", "[2, 4]"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.u = torch::randn({2, 4});
       },
       "u", "inclusive"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.h0 = torch::zeros({1, 2, 4, 3});
       },
       "h0", "[2, 2, 4, 3]"},
      {scalar_delta, [](ValidInputs& v) { v.in.h0 = v.in.h0.to(torch::kBFloat16); }, "h0", "Float"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.cu_seqlens = torch::tensor({0, 8}, torch::kLong);
       },
       "cu_seqlens", "batch size 1"},
      {scalar_delta,
       [](ValidInputs& v) {
         v.in.cu_seqlens = torch::tensor({0, 8}, torch::kInt);
       },
       "cu_seqlens", "Long"},
      {scalar_delta, [](ValidInputs& v) { v.options.chunk = 0; }, "options.chunk", "positive"},
      {scalar_delta, [](ValidInputs& v) { v.options.scale = std::nan(""); }, "options.scale",
       "finite"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("expecting an error for '" + c.arg + "'");
    ValidInputs v = validInputs(c.kind);
    c.mutate(v);
    expectInvalid([&] { ops::recurrence(v.in, v.options); }, c.arg, c.detail);
  }

  // Packed varlen: B == 1, offsets start at 0, do not decrease, end at T; h0 has N rows.
  auto packed = [&](std::vector<int64_t> cu) {
    ValidInputs v = validInputs(scalar_delta);
    for (torch::Tensor* t : {&v.in.q, &v.in.k, &v.in.v, &v.in.g, &v.in.beta})
      *t = (*t)[0].unsqueeze(0);
    v.in.h0 = torch::zeros({int64_t(cu.size()) - 1, 2, 4, 3});
    v.in.cu_seqlens = torch::tensor(cu, torch::kLong);
    return v;
  };
  {
    ValidInputs ok = packed({0, 3, 8});
    EXPECT_NO_THROW(ops::recurrence(ok.in, ok.options));
  }
  for (const auto& [cu, detail] :
       {std::pair<std::vector<int64_t>, std::string>{{0, 5, 3, 8}, "non-decreasing"},
        {{1, 3, 8}, "first offset 0"},
        {{0, 3, 7}, "last offset 8"},
        {{0}, "at least 2"}}) {
    ValidInputs v = packed(cu.size() > 1 ? cu : std::vector<int64_t>{0, 8});
    if (cu.size() == 1) v.in.cu_seqlens = torch::tensor(cu, torch::kLong);
    expectInvalid([&] { ops::recurrence(v.in, v.options); }, "cu_seqlens", detail);
  }
  {
    ValidInputs v = packed({0, 3, 8});
    v.in.h0 = torch::zeros({1, 2, 4, 3});
    expectInvalid([&] { ops::recurrence(v.in, v.options); }, "h0", "[2, 2, 4, 3]");
  }
}

TEST(OpsValidation, RecurrenceStep) {
  const RecurrenceKind kind{DecayClass::Diagonal, UpdateRule::Delta, Readout::Inclusive};
  auto valid = [&] {
    ops::RecurrenceInputs in;
    in.q = torch::randn({2, 2, 4});
    in.k = torch::randn({2, 2, 4});
    in.v = torch::randn({2, 2, 3});
    in.g = -torch::rand({2, 2, 4});
    in.beta = torch::rand({2, 2});
    return in;
  };
  ops::RecurrenceOptions options;
  options.kind = kind;
  torch::Tensor state = torch::zeros({2, 2, 4, 3});
  ASSERT_NO_THROW(ops::recurrenceStep(valid(), state, options));

  auto expectStepInvalid =
      [&](const std::function<void(ops::RecurrenceInputs&, torch::Tensor&)>& mutate,
          const std::string& arg, const std::string& detail) {
        ops::RecurrenceInputs in = valid();
        torch::Tensor s = torch::zeros({2, 2, 4, 3});
        mutate(in, s);
        expectInvalid([&] { ops::recurrenceStep(in, s, options); }, arg, detail);
      };
  expectStepInvalid(
      [](auto& in, auto&) {
        in.q = torch::randn({2, 1, 2, 4});
      },
      "q", "3 dimensions");
  expectStepInvalid(
      [](auto& in, auto&) {
        in.g = -torch::rand({2, 2});
      },
      "g", "decay class diagonal");
  expectStepInvalid([](auto& in, auto&) { in.beta = torch::rand({2, 2, 1}); }, "beta", "[2, 2]");
  expectStepInvalid([](auto& in, auto&) { in.h0 = torch::zeros({2, 2, 4, 3}); }, "h0", "undefined");
  expectStepInvalid(
      [](auto&, auto& s) {
        s = torch::zeros({2, 2, 3, 4});
      },
      "state", "[2, 2, 4, 3]");
  expectStepInvalid([](auto&, auto& s) { s = s.to(torch::kBFloat16); }, "state", "Float");
  expectStepInvalid(
      [](auto&, auto& s) {
        s = torch::zeros({2, 2, 3, 4}).transpose(2, 3);
      },
      "state", "contiguous");
}

TEST(OpsValidation, Scan) {
  const torch::Tensor x = torch::randn({2, 5, 3}), g = -torch::rand({2, 5, 3});
  ASSERT_NO_THROW(ops::scan(x, g, torch::zeros({2, 3}), {}, true));
  expectInvalid([&] { ops::scan(x.to(torch::kLong), g, {}, {}, false); }, "x", "Long");
  expectInvalid([&] { ops::scan(x[0], g, {}, {}, false); }, "x", "3 dimensions");
  expectInvalid([&] { ops::scan(x, g[0], {}, {}, false); }, "g", "[2, 5, 3]");
  expectInvalid([&] { ops::scan(x, g, torch::zeros({3, 3}), {}, false); }, "h0", "[2, 3]");
  expectInvalid(
      [&] {
        ops::scan(x, g, {}, torch::tensor({0, 5}, torch::kLong), false);
      },
      "cu_seqlens", "batch size 1");
}

}  // namespace
}  // namespace linac::test
