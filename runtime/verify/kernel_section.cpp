// Section "kernel": the recurrence alone, with gates drawn as DESIGN.md section 4 asks.
#include "verify/sections.h"

namespace linac::verify::detail {
namespace {

/// A log-decay draw: logsigmoid(spread * N(0,1)), clamped below at `floor`. spread 1 is the
/// near-zero regime; wider spreads push many tokens to the clamp.
struct GateRegime {
  const char* name;
  double spread;
  double floor;
};
constexpr GateRegime kRegimes[] = {
    {"g=logsigmoid(N)", 1.0, -1e9},
    {"g clamped at -5", 4.0, -5.0},
    {"g clamped at -20", 16.0, -20.0},
};

torch::Tensor drawLogDecay(at::IntArrayRef sizes, const GateRegime& r) {
  return torch::clamp_min(torch::log_sigmoid(r.spread * torch::randn(sizes, torch::kFloat64)), r.floor);
}

torch::Tensor unitRows(torch::Tensor t) { return t / t.norm(2, -1, true); }

}  // namespace

void kernelSection(Report& report, const runtime::VariantKernels& kernels, const Shape& s,
                   kernels::DType dtype, const Options& options, std::ostream& log) {
  const auto& kind = kernels.kind;
  const int64_t chunk = options.chunk ? options.chunk : kernels.chunk;
  for (const GateRegime& regime : kRegimes) {
    std::string setting = std::string(dtypeName(dtype)) + " " + s.text() + " " + regime.name;
    log << "  kernel      " << setting << std::endl;  // flushed: a run cut short shows where it was
    CoreInputs in;
    if (kernels.vectorState) {
      const int64_t D = s.heads * s.valueDim;
      in.v = torch::randn({s.batch, s.seqLen, D}, torch::kFloat64);
      in.g = drawLogDecay({s.batch, s.seqLen, D}, regime);
      in.h0 = torch::randn({s.batch, D}, torch::kFloat64);
      compareRecurrence(report, "kernel", setting, kind, true, in, 1.0, chunk, dtype, options);
      continue;
    }
    const bool delta = kind.update == kernels::UpdateRule::Delta;
    in.q = torch::randn({s.batch, s.seqLen, s.heads, s.keyDim}, torch::kFloat64);
    in.k = torch::randn({s.batch, s.seqLen, s.heads, s.keyDim}, torch::kFloat64);
    if (delta) {  // the delta rule is only stable for unit keys (DeltaNet L2-normalises q and k)
      in.q = unitRows(in.q);
      in.k = unitRows(in.k);
    }
    in.v = torch::randn({s.batch, s.seqLen, s.heads, s.valueDim}, torch::kFloat64);
    switch (kind.decay) {
    case kernels::DecayClass::None: break;
    case kernels::DecayClass::Fixed: in.g = drawLogDecay({s.heads}, regime); break;
    case kernels::DecayClass::Scalar: in.g = drawLogDecay({s.batch, s.seqLen, s.heads}, regime); break;
    case kernels::DecayClass::Diagonal:
      in.g = drawLogDecay({s.batch, s.seqLen, s.heads, s.keyDim}, regime);
      break;
    }
    if (delta) in.beta = torch::sigmoid(torch::randn({s.batch, s.seqLen, s.heads}, torch::kFloat64));
    if (kind.readout == kernels::Readout::ExclusiveBonus)
      in.u = torch::randn({s.heads, s.keyDim}, torch::kFloat64);
    in.h0 = torch::randn({s.batch, s.heads, s.keyDim, s.valueDim}, torch::kFloat64);
    compareRecurrence(report, "kernel", setting, kind, false, in, 1.0 / std::sqrt(double(s.keyDim)),
                      chunk, dtype, options);
    if (kind.decay == kernels::DecayClass::None) break;  // the regimes differ only in g
  }
}

}  // namespace linac::verify::detail
