// CPU chunkwise recurrence kernels vs the float64 oracle: every decay class x update rule x
// readout, several shapes and dtypes, packed varlen, and the decode step.
#include <gtest/gtest.h>

#include <stdexcept>

#include "kernels/cpu/cpu_kernels.h"
#include "test_util.h"

namespace linac::test {
namespace {

/// Shape / dtype configurations every kind is checked under.
enum class Config {
  F32Base,      // T=100 (not a multiple of C=32), dk=48 (not a power of two) != dv=64, h0, d_ht
  Bf16Base,     // the same in bf16
  F16Base,      // the same in fp16
  F32Chunk64,   // T=130, C=64, dk=64 != dv=32, no h0, no d_ht
  F32Strong,    // strong decays clamped at -20 (cumulative ~-1000 per chunk), T=130, C=64
};

RecurrenceCase makeCase(const RecurrenceKind& kind, Config config) {
  RecurrenceCase c;
  c.kind = kind;
  switch (config) {
    case Config::F32Base: break;
    case Config::Bf16Base: c.dtype = DType::BF16; break;
    case Config::F16Base: c.dtype = DType::F16; break;
    case Config::F32Chunk64:
      c.seq_len = 130;
      c.chunk = 64;
      c.key_dim = 64;
      c.value_dim = 32;
      c.with_h0 = false;
      c.with_d_ht = false;
      break;
    case Config::F32Strong:
      c.seq_len = 130;
      c.chunk = 64;
      c.key_dim = 32;
      c.value_dim = 48;
      c.decay_strength = 8.0;
      c.min_log_decay = -20.0;
      break;
  }
  return c;
}

const char* configName(Config config) {
  switch (config) {
    case Config::F32Base: return "f32_T100_C32_dk48_dv64";
    case Config::Bf16Base: return "bf16_T100_C32_dk48_dv64";
    case Config::F16Base: return "f16_T100_C32_dk48_dv64";
    case Config::F32Chunk64: return "f32_T130_C64_dk64_dv32_noh0";
    case Config::F32Strong: return "f32_T130_C64_strongdecay";
  }
  return "?";
}

class RecurrenceVsOracle : public ::testing::TestWithParam<std::tuple<int, Config>> {};

TEST_P(RecurrenceVsOracle, OutputsStatesAndGradients) {
  const RecurrenceKind kind = allKinds()[std::get<0>(GetParam())];
  const RecurrenceCase c = makeCase(kind, std::get<1>(GetParam()));
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", kind " + kindName(kind));
  const RecurrenceData data = makeRecurrenceData(c, seed);
  expectClose(runCpuKernels(c, data), runOracle(c, data), toleranceFor(c.dtype), c.dtype);
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, RecurrenceVsOracle,
    ::testing::Combine(::testing::Range(0, 16),
                       ::testing::Values(Config::F32Base, Config::Bf16Base, Config::F16Base,
                                         Config::F32Chunk64, Config::F32Strong)),
    [](const auto& info) {
      return kindName(allKinds()[std::get<0>(info.param)]) + "_" + configName(std::get<1>(info.param));
    });

class RecurrencePerKind : public ::testing::TestWithParam<int> {};

// Packed varlen (B = 1, cu_seqlens) equals running each sequence alone, and matches the oracle.
TEST_P(RecurrencePerKind, VarlenMatchesSeparateSequencesAndOracle) {
  const RecurrenceKind kind = allKinds()[GetParam()];
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", kind " + kindName(kind));
  RecurrenceCase packed;
  packed.kind = kind;
  packed.batch = 1;
  packed.seq_len = 130;
  packed.cu_seqlens = {0, 37, 37, 101, 130};  // includes an empty sequence
  packed.key_dim = 32;
  packed.value_dim = 48;
  const RecurrenceData data = makeRecurrenceData(packed, seed);
  const RecurrenceResult got = runCpuKernels(packed, data);
  expectClose(got, runOracle(packed, data), kTolF32, DType::F32);

  for (size_t n = 0; n + 1 < packed.cu_seqlens.size(); ++n) {
    const int64_t begin = packed.cu_seqlens[n], end = packed.cu_seqlens[n + 1];
    if (begin == end) continue;
    RecurrenceCase alone = packed;
    alone.cu_seqlens.clear();
    alone.seq_len = end - begin;
    RecurrenceData part = data;
    auto tokens = [&](const torch::Tensor& t) { return t.slice(1, begin, end).contiguous(); };
    auto seq = [&](const torch::Tensor& t) { return t.slice(0, n, n + 1).contiguous(); };
    part.q = tokens(data.q);
    part.k = tokens(data.k);
    part.v = tokens(data.v);
    part.d_o = tokens(data.d_o);
    if (kind.decay == DecayClass::Scalar || kind.decay == DecayClass::Diagonal) part.g = tokens(data.g);
    if (data.beta.defined()) part.beta = tokens(data.beta);
    part.h0 = seq(data.h0);
    part.d_ht = seq(data.d_ht);
    const RecurrenceResult one = runCpuKernels(alone, part);
    // Same arithmetic per (sequence, head): identical up to the reduction order of d_g / d_u.
    EXPECT_TRUE(torch::equal(one.o, tokens(got.o))) << "o of sequence " << n;
    EXPECT_TRUE(torch::equal(one.ht, seq(got.ht))) << "ht of sequence " << n;
    EXPECT_TRUE(torch::equal(one.dq, tokens(got.dq))) << "dq of sequence " << n;
    EXPECT_TRUE(torch::equal(one.dk, tokens(got.dk))) << "dk of sequence " << n;
    EXPECT_TRUE(torch::equal(one.dv, tokens(got.dv))) << "dv of sequence " << n;
    EXPECT_TRUE(torch::equal(one.dh0, seq(got.dh0))) << "dh0 of sequence " << n;
  }
}

// Running the decode step token by token gives the chunked forward's outputs and final state.
TEST_P(RecurrencePerKind, RecurrentStepMatchesChunkForward) {
  const RecurrenceKind kind = allKinds()[GetParam()];
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", kind " + kindName(kind));
  RecurrenceCase c;
  c.kind = kind;
  c.seq_len = 40;
  c.chunk = 16;
  c.key_dim = 32;
  c.value_dim = 64;
  const RecurrenceData d = makeRecurrenceData(c, seed);
  const RecurrenceResult chunked = runCpuForward(c, d);

  torch::Tensor state = d.h0.clone();  // [B, H, dk, dv]
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < c.seq_len; ++t) {
    auto at = [&](const torch::Tensor& x) { return x.select(1, t).contiguous(); };
    torch::Tensor q = at(d.q), k = at(d.k), v = at(d.v), g, beta;
    if (kind.decay == DecayClass::Fixed) g = d.g;
    if (kind.decay == DecayClass::Scalar || kind.decay == DecayClass::Diagonal) g = at(d.g);
    if (d.beta.defined()) beta = at(d.beta);
    torch::Tensor o = torch::empty({c.batch, c.heads, c.value_dim}, d.v.options());
    kernels::RecurrenceStepArgs args;
    args.q = q.data_ptr();
    args.k = k.data_ptr();
    args.v = v.data_ptr();
    args.g = g.defined() ? g.data_ptr<float>() : nullptr;
    args.beta = beta.defined() ? beta.data_ptr<float>() : nullptr;
    args.u = d.u.defined() ? d.u.data_ptr<float>() : nullptr;
    args.scale = float(d.scale);
    args.state = state.data_ptr<float>();
    args.o = o.data_ptr();
    kernels::cpu::recurrentStep(kind, c.batch, c.heads, c.key_dim, c.value_dim, args, c.dtype);
    outputs.push_back(o.to(torch::kDouble));
  }
  const double o_error = relRms(torch::stack(outputs, 1), chunked.o);
  const double state_error = relRms(state, chunked.ht);
  recordError(DType::F32, "step-vs-chunk", std::max(o_error, state_error));
  EXPECT_LT(o_error, kTolF32);
  EXPECT_LT(state_error, kTolF32);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, RecurrencePerKind, ::testing::Range(0, 16),
                         [](const auto& info) { return kindName(allKinds()[info.param]); });

// The widest head size of DESIGN.md's D in {64, 128, 256} that stays fast on the CPU.
TEST(RecurrenceCpu, DiagonalDeltaBonusWithD128) {
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  RecurrenceCase c;
  c.kind = {DecayClass::Diagonal, UpdateRule::Delta, Readout::ExclusiveBonus};
  c.batch = 1;
  c.heads = 1;
  c.seq_len = 70;
  c.chunk = 64;
  c.key_dim = 128;
  c.value_dim = 128;
  const RecurrenceData d = makeRecurrenceData(c, seed);
  expectClose(runCpuKernels(c, d), runOracle(c, d), kTolF32, DType::F32);
}

TEST(RecurrenceCpu, RejectsMalformedCalls) {
  RecurrenceCase c;
  c.kind = {DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive};
  const RecurrenceData d = makeRecurrenceData(c, 1);
  kernels::RecurrenceShape shape;
  shape.batch = c.batch;
  shape.seq_len = c.seq_len;
  shape.heads = c.heads;
  shape.key_dim = c.key_dim;
  shape.value_dim = c.value_dim;
  torch::Tensor o = torch::empty_like(d.v);
  kernels::RecurrenceForwardArgs args;
  args.q = d.q.data_ptr();
  args.k = d.k.data_ptr();
  args.v = d.v.data_ptr();
  args.g = d.g.data_ptr<float>();
  args.beta = d.beta.data_ptr<float>();
  args.o = o.data_ptr();
  EXPECT_NO_THROW(kernels::cpu::chunkForward(c.kind, shape, args, DType::F32, 32));
  EXPECT_THROW(kernels::cpu::chunkForward(c.kind, shape, args, DType::F32, 0), std::invalid_argument);
  auto no_beta = args;
  no_beta.beta = nullptr;
  EXPECT_THROW(kernels::cpu::chunkForward(c.kind, shape, no_beta, DType::F32, 32), std::invalid_argument);
  auto no_g = args;
  no_g.g = nullptr;
  EXPECT_THROW(kernels::cpu::chunkForward(c.kind, shape, no_g, DType::F32, 32), std::invalid_argument);
  const int64_t cu[] = {0, 50, 100};
  auto varlen = shape;  // cu_seqlens with B = 2 is malformed
  varlen.cu_seqlens = cu;
  varlen.num_seqs = 2;
  EXPECT_THROW(kernels::cpu::chunkForward(c.kind, varlen, args, DType::F32, 32), std::invalid_argument);
  const int64_t bad_end[] = {0, 50, 99};
  auto short_varlen = shape;
  short_varlen.batch = 1;
  short_varlen.seq_len = 100;
  short_varlen.cu_seqlens = bad_end;
  short_varlen.num_seqs = 2;
  EXPECT_THROW(kernels::cpu::chunkForward(c.kind, short_varlen, args, DType::F32, 32),
               std::invalid_argument);
  kernels::RecurrenceBackwardArgs backward;
  backward.fwd = args;  // d_o missing
  EXPECT_THROW(kernels::cpu::chunkBackward(c.kind, shape, backward, DType::F32, 32), std::invalid_argument);
}

}  // namespace
}  // namespace linac::test
