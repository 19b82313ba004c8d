// HGRN vector scan (CPU) vs the float64 oracle, dense and packed varlen, fp32 and bf16.
#include <gtest/gtest.h>

#include <stdexcept>

#include "kernels/cpu/cpu_kernels.h"
#include "oracle/oracle.h"
#include "test_util.h"

namespace linac::test {
namespace {

struct ScanCase {
  DType dtype = DType::F32;
  int64_t batch = 2, seq_len = 100, channels = 80;  // 80 spans two channel blocks
  std::vector<int64_t> cu_seqlens;
  bool with_h0 = true, with_d_ht = true;
  int64_t numSeqs() const { return cu_seqlens.empty() ? batch : int64_t(cu_seqlens.size()) - 1; }
};

void checkScan(const ScanCase& c) {
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", dtype " + dtypeName(c.dtype));
  torch::manual_seed(seed);
  const int64_t B = c.batch, T = c.seq_len, D = c.channels, N = c.numSeqs();
  const torch::ScalarType io = torchType(c.dtype);
  // HGRN: x = silu(i) (1 - f) with f = sigmoid(.), g = log f.
  const torch::Tensor f = torch::sigmoid(torch::randn({B, T, D}));
  const torch::Tensor g = torch::log(f).contiguous();
  const torch::Tensor x = (torch::silu(torch::randn({B, T, D})) * (1 - f)).to(io);
  const torch::Tensor h0 = c.with_h0 ? torch::randn({N, D}) : torch::Tensor();
  const torch::Tensor d_h = torch::randn({B, T, D}).to(io);
  const torch::Tensor d_ht = c.with_d_ht ? torch::randn({N, D}) : torch::Tensor();

  kernels::ScanShape shape;
  shape.batch = B;
  shape.seq_len = T;
  shape.channels = D;
  shape.cu_seqlens = c.cu_seqlens.empty() ? nullptr : c.cu_seqlens.data();
  shape.num_seqs = N;
  torch::Tensor h = torch::empty_like(x), ht = torch::empty({N, D});
  kernels::ScanBackwardArgs args;
  args.fwd.x = x.data_ptr();
  args.fwd.g = g.data_ptr<float>();
  args.fwd.h0 = c.with_h0 ? h0.data_ptr<float>() : nullptr;
  args.fwd.h = h.data_ptr();
  args.fwd.ht = ht.data_ptr<float>();
  kernels::cpu::scanForward(shape, args.fwd, c.dtype);
  torch::Tensor dx = torch::empty_like(x), dg = torch::empty_like(g), dh0 = torch::empty({N, D});
  args.d_h = d_h.data_ptr();
  args.d_ht = c.with_d_ht ? d_ht.data_ptr<float>() : nullptr;
  args.d_x = dx.data_ptr();
  args.d_g = dg.data_ptr<float>();
  args.d_h0 = dh0.data_ptr<float>();
  kernels::cpu::scanBackward(shape, args, c.dtype);

  auto leaf = [](const torch::Tensor& t) { return t.to(torch::kDouble).detach().requires_grad_(true); };
  torch::Tensor rx = leaf(x), rg = leaf(g), rh0 = leaf(c.with_h0 ? h0 : torch::zeros({N, D}));
  const oracle::ScanOutputs ref = oracle::scan(rx, rg, rh0, c.cu_seqlens);
  torch::Tensor loss = (ref.h * d_h.to(torch::kDouble)).sum();
  if (c.with_d_ht) loss = loss + (ref.ht * d_ht.to(torch::kDouble)).sum();
  loss.backward();

  const double tol = toleranceFor(c.dtype);
  const std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>> pairs[] = {
      {"scan h", {h, ref.h.detach()}},   {"scan ht", {ht, ref.ht.detach()}},
      {"scan dx", {dx, rx.grad()}},      {"scan dg", {dg, rg.grad()}},
      {"scan dh0", {dh0, rh0.grad()}}};
  for (const auto& [name, tensors] : pairs) {
    const double error = relRms(tensors.first, tensors.second);
    recordError(c.dtype, name, error);
    EXPECT_LT(error, tol) << name;
  }
}

TEST(ScanCpu, MatchesOracleF32) { checkScan({}); }

TEST(ScanCpu, MatchesOracleBf16) {
  ScanCase c;
  c.dtype = DType::BF16;
  checkScan(c);
}

TEST(ScanCpu, MatchesOracleF16NoInitialState) {
  ScanCase c;
  c.dtype = DType::F16;
  c.with_h0 = false;
  c.with_d_ht = false;
  checkScan(c);
}

TEST(ScanCpu, PackedVarlenMatchesOracle) {
  ScanCase c;
  c.batch = 1;
  c.seq_len = 130;
  c.cu_seqlens = {0, 1, 64, 64, 130};
  checkScan(c);
}

TEST(ScanCpu, RejectsMalformedCalls) {
  const torch::Tensor x = torch::randn({2, 10, 8}), g = torch::zeros({2, 10, 8});
  torch::Tensor h = torch::empty_like(x);
  kernels::ScanShape shape;
  shape.batch = 2;
  shape.seq_len = 10;
  shape.channels = 8;
  kernels::ScanForwardArgs args;
  args.x = x.data_ptr();
  args.g = g.data_ptr<float>();
  args.h = h.data_ptr();
  EXPECT_NO_THROW(kernels::cpu::scanForward(shape, args, DType::F32));
  auto no_g = args;
  no_g.g = nullptr;
  EXPECT_THROW(kernels::cpu::scanForward(shape, no_g, DType::F32), std::invalid_argument);
  const int64_t cu[] = {0, 4, 10};
  auto varlen = shape;  // B must be 1 with cu_seqlens
  varlen.cu_seqlens = cu;
  varlen.num_seqs = 2;
  EXPECT_THROW(kernels::cpu::scanForward(varlen, args, DType::F32), std::invalid_argument);
}

}  // namespace
}  // namespace linac::test
