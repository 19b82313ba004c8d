// Section "consistency": the kernels against themselves where the math says they must agree.
//   varlen: sequences packed with cu_seqlens (B = 1) == each sequence run alone
//   step:   the decode step applied token by token == the chunked forward (matrix state only)
#include "verify/sections.h"

#include <torch/utils.h>  // NoGradGuard

namespace linac::verify::detail {
namespace {

torch::Tensor unitRows(const torch::Tensor& t) { return t / t.norm(2, -1, true); }

/// Sequence lengths for the packed run: uneven, one empty, one shorter than a chunk.
std::vector<int64_t> packedLengths(int64_t seqLen) {
  return {seqLen / 3, 0, 1, seqLen - seqLen / 3 - 1};
}

}  // namespace

void consistencySection(Report& report, const runtime::VariantKernels& kernels, const Shape& s,
                        kernels::DType dtype, const Options& options, std::ostream& log) {
  const std::string setting = std::string(dtypeName(dtype)) + " " + s.text();
  log << "  consistency " << setting << std::endl;
  const double tol = tolerance(dtype);
  const auto type = scalarType(dtype);
  const auto dev = device(options);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  const int64_t T = s.seqLen, H = s.heads, dk = s.keyDim, dv = s.valueDim;
  const auto& kind = kernels.kind;
  const int64_t chunk = options.chunk ? options.chunk : kernels.chunk;

  std::vector<int64_t> lengths = packedLengths(T), offsets = {0};
  for (int64_t n : lengths) offsets.push_back(offsets.back() + n);
  torch::Tensor cu = torch::tensor(offsets, torch::kInt64).to(dev);
  const int64_t N = static_cast<int64_t>(lengths.size());

  if (kernels.vectorState) {
    const int64_t D = H * dv;
    torch::Tensor x = torch::randn({1, T, D}, f32).to(type);
    torch::Tensor g = torch::log_sigmoid(torch::randn({1, T, D}, f32));
    torch::Tensor h0 = torch::randn({N, D}, f32);
    auto [h, ht] = ops::scan(x, g, h0, cu, true);
    for (int64_t n = 0; n < N; ++n) {
      if (lengths[n] == 0) continue;
      auto sl = [&](const torch::Tensor& t) { return t.slice(1, offsets[n], offsets[n + 1]).contiguous(); };
      auto [hn, htn] = ops::scan(sl(x), sl(g), h0.slice(0, n, n + 1).contiguous(), torch::Tensor(), true);
      compare(report, "consistency", "varlen h, seq " + std::to_string(n), setting, sl(h), hn, tol);
      compare(report, "consistency", "varlen ht, seq " + std::to_string(n), setting, ht.slice(0, n, n + 1), htn, tol);
    }
    return;
  }

  const bool delta = kind.update == kernels::UpdateRule::Delta;
  auto keys = [&](int64_t b, int64_t t) {
    torch::Tensor k = torch::randn({b, t, H, dk}, f32);
    return (delta ? unitRows(k) : k).to(type);
  };
  auto decay = [&](int64_t b, int64_t t) -> torch::Tensor {
    switch (kind.decay) {
    case kernels::DecayClass::None: return {};
    case kernels::DecayClass::Fixed: return torch::log_sigmoid(torch::randn({H}, f32));
    case kernels::DecayClass::Scalar: return torch::log_sigmoid(torch::randn({b, t, H}, f32));
    case kernels::DecayClass::Diagonal: return torch::log_sigmoid(torch::randn({b, t, H, dk}, f32));
    }
    return {};
  };
  const double scale = 1.0 / std::sqrt(double(dk));
  ops::RecurrenceOptions opt{kind, scale, chunk, true};
  auto slice = [&](const torch::Tensor& t, int64_t n) {
    if (!t.defined() || t.dim() < 3) return t;  // undefined, [H] fixed decay
    return t.slice(1, offsets[n], offsets[n + 1]).contiguous();
  };

  // Packed varlen vs alone.
  {
    ops::RecurrenceInputs in{keys(1, T), keys(1, T), torch::randn({1, T, H, dv}, f32).to(type), decay(1, T),
                             delta ? torch::sigmoid(torch::randn({1, T, H}, f32)) : torch::Tensor(),
                             kind.readout == kernels::Readout::ExclusiveBonus ? torch::randn({H, dk}, f32) : torch::Tensor(),
                             torch::randn({N, H, dk, dv}, f32), cu};
    torch::NoGradGuard noGrad;
    auto [o, ht] = ops::recurrence(in, opt);
    for (int64_t n = 0; n < N; ++n) {
      if (lengths[n] == 0) continue;
      ops::RecurrenceInputs one{slice(in.q, n), slice(in.k, n), slice(in.v, n), slice(in.g, n), slice(in.beta, n),
                                in.u, in.h0.slice(0, n, n + 1).contiguous(), {}};
      auto [on, htn] = ops::recurrence(one, opt);
      compare(report, "consistency", "varlen o, seq " + std::to_string(n), setting, slice(o, n), on, tol);
      compare(report, "consistency", "varlen ht, seq " + std::to_string(n), setting, ht.slice(0, n, n + 1), htn, tol);
    }
  }

  // Decode steps vs chunked.
  {
    const int64_t B = s.batch;
    ops::RecurrenceInputs in{keys(B, T), keys(B, T), torch::randn({B, T, H, dv}, f32).to(type), decay(B, T),
                             delta ? torch::sigmoid(torch::randn({B, T, H}, f32)) : torch::Tensor(),
                             kind.readout == kernels::Readout::ExclusiveBonus ? torch::randn({H, dk}, f32) : torch::Tensor(),
                             torch::randn({B, H, dk, dv}, f32), {}};
    torch::NoGradGuard noGrad;
    auto [o, ht] = ops::recurrence(in, opt);
    torch::Tensor state = in.h0.clone();
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t < T; ++t) {
      auto at = [&](const torch::Tensor& x) {
        if (!x.defined() || x.dim() < 3) return x;
        return x.select(1, t).contiguous();
      };
      ops::RecurrenceInputs step{at(in.q), at(in.k), at(in.v), at(in.g), at(in.beta), in.u, {}, {}};
      steps.push_back(ops::recurrenceStep(step, state, opt));
    }
    compare(report, "consistency", "step o", setting, torch::stack(steps, 1), o, tol);
    compare(report, "consistency", "step state", setting, state, ht, tol);
  }
}

}  // namespace linac::verify::detail
