// The comparison machinery shared by the verify sections.
#include "oracle/oracle.h"
#include "verify/sections.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace linac::verify::detail {

torch::ScalarType scalarType(kernels::DType dtype) {
  switch (dtype) {
  case kernels::DType::F32: return torch::kFloat32;
  case kernels::DType::BF16: return torch::kBFloat16;
  case kernels::DType::F16: return torch::kFloat16;
  }
  return torch::kFloat32;
}

const char* dtypeName(kernels::DType dtype) {
  switch (dtype) {
  case kernels::DType::F32: return "fp32";
  case kernels::DType::BF16: return "bf16";
  case kernels::DType::F16: return "fp16";
  }
  return "?";
}

double relRms(const torch::Tensor& x, const torch::Tensor& ref) {
  torch::Tensor r = ref.detach().to(torch::kCPU, torch::kFloat64);
  torch::Tensor d = x.detach().to(torch::kCPU, torch::kFloat64) - r;
  double num = d.norm().item<double>(), den = r.norm().item<double>();
  return den > 0 ? num / den : num;
}

torch::Device device(const Options& options) {
  return options.backend == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

void compare(Report& report, const std::string& section, const std::string& what,
             const std::string& setting, const torch::Tensor& x, const torch::Tensor& ref,
             double tol) {
  Check c{section, what, setting, 0.0, tol, true, ""};
  if (!x.defined() && !ref.defined()) return;  // neither side has it: nothing to compare
  if (x.defined() != ref.defined()) {
    c.error = std::nan("");
    c.note = x.defined() ? "oracle has no value" : "kernel produced no value";
  } else if (x.sizes() != ref.sizes()) {
    c.error = std::nan("");
    c.note = "shape mismatch";
  } else {
    c.error = relRms(x, ref);
  }
  report.checks.push_back(c);
}

void compareTotal(Report& report, const std::string& section, const std::string& what,
                  const std::string& setting, const torch::Tensor& x, const torch::Tensor& ref,
                  const torch::Tensor& contributions, double tol) {
  compare(report, section, what, setting, x, ref, tol);
  Check& c = report.checks.back();
  if (std::isnan(c.error) || !contributions.defined()) return;  // missing value or shape mismatch
  // c.error is ||x - ref|| / ||ref||; rescale it to ||x - ref|| / max(||ref||, ||terms||).
  const double sum = ref.detach().to(torch::kCPU, torch::kFloat64).norm().item<double>();
  const double terms = contributions.detach().to(torch::kCPU, torch::kFloat64).norm().item<double>();
  char note[96];
  std::snprintf(note, sizeof note, "total over tokens; plain rel-RMS %.2e, ||terms|| / ||total|| %.2g",
                c.error, sum > 0 ? terms / sum : 0.0);
  if (terms > sum) c.error = sum > 0 ? c.error * sum / terms : c.error / terms;  // relRms: diff if sum 0
  c.note = note;
}

namespace {

/// A float64 leaf with the values of `t` rounded to `type` (so both sides see the same inputs).
torch::Tensor roundedLeaf(const torch::Tensor& t, torch::ScalarType type) {
  if (!t.defined()) return t;
  return t.detach().to(type).to(torch::kFloat64).requires_grad_(true);
}

/// The kernel-side leaf: same values, in `type`, on `device`.
torch::Tensor kernelLeaf(const torch::Tensor& master, torch::ScalarType type, torch::Device device) {
  if (!master.defined()) return master;
  return master.detach().to(device, type).requires_grad_(true);
}

torch::Tensor gradOf(const torch::Tensor& t) { return t.defined() ? t.grad() : torch::Tensor(); }

bool isNotImplemented(const std::exception& e) {
  return std::string(e.what()).find("not implemented") != std::string::npos;
}

}  // namespace

void compareRecurrence(Report& report, const std::string& section, const std::string& setting,
                       const kernels::RecurrenceKind& kind, bool vectorState, const CoreInputs& in,
                       double scale, int64_t chunk, kernels::DType dtype, const Options& options) {
  const double tol = tolerance(dtype);
  const auto type = scalarType(dtype);
  const auto dev = device(options);

  // Both sides start from identical values: q, k, v (x for the scan) rounded to the kernel dtype.
  CoreInputs ref{roundedLeaf(in.q, type), roundedLeaf(in.k, type), roundedLeaf(in.v, type),
                 roundedLeaf(in.g, torch::kFloat32), roundedLeaf(in.beta, torch::kFloat32),
                 roundedLeaf(in.u, torch::kFloat32), roundedLeaf(in.h0, torch::kFloat32)};
  CoreInputs ker{kernelLeaf(ref.q, type, dev), kernelLeaf(ref.k, type, dev), kernelLeaf(ref.v, type, dev),
                 kernelLeaf(ref.g, torch::kFloat32, dev), kernelLeaf(ref.beta, torch::kFloat32, dev),
                 kernelLeaf(ref.u, torch::kFloat32, dev), kernelLeaf(ref.h0, torch::kFloat32, dev)};

  // The fixed class's g is one value per head: the oracle runs it as the same value at every token
  // (the scalar class, identical arithmetic), so its per-token contributions to dg are known.
  const bool fixedDecay = !vectorState && kind.decay == kernels::DecayClass::Fixed && ref.g.defined();
  torch::Tensor gTokens;
  kernels::RecurrenceKind oracleKind = kind;
  if (fixedDecay) {
    const int64_t B = ref.q.size(0), T = ref.q.size(1), H = ref.g.size(0);
    gTokens = ref.g.detach().view({1, 1, H}).expand({B, T, H}).clone().requires_grad_(true);
    oracleKind.decay = kernels::DecayClass::Scalar;
  }
  const torch::Tensor gOracle = fixedDecay ? gTokens : ref.g;

  torch::Tensor o, ht, oRef, htRef;
  if (vectorState) {
    std::tie(o, ht) = ops::scan(ker.v, ker.g, ker.h0, torch::Tensor(), true);
    auto out = oracle::scan(ref.v, ref.g, ref.h0);
    oRef = out.h;
    htRef = out.ht;
  } else {
    ops::RecurrenceOptions opt{kind, scale, chunk, true};
    std::tie(o, ht) = ops::recurrence({ker.q, ker.k, ker.v, ker.g, ker.beta, ker.u, ker.h0, {}}, opt);
    oracle::RecurrenceInputs oi{ref.q, ref.k, ref.v, gOracle, ref.beta, ref.u, ref.h0, scale, {}};
    auto out = oracle::recurrence(oracleKind, oi);
    oRef = out.o;
    htRef = out.ht;
  }
  compare(report, section, "o", setting, o, oRef, tol);
  compare(report, section, "ht", setting, ht, htRef, tol);

  // Same upstream gradients on both sides.
  // The upstream gradient reaches the kernel in o's dtype: give the oracle the same values.
  torch::Tensor dO = torch::randn(oRef.sizes(), torch::kFloat64).to(o.scalar_type()).to(torch::kFloat64);
  torch::Tensor dHt = torch::randn(htRef.sizes(), torch::kFloat64);
  (oRef * dO).sum().add((htRef * dHt).sum()).backward();
  try {
    torch::Tensor loss = (o.to(torch::kFloat64) * dO.to(dev)).sum() + (ht.to(torch::kFloat64) * dHt.to(dev)).sum();
    loss.backward();
  } catch (const std::exception& e) {
    if (!isNotImplemented(e)) throw;
    report.checks.push_back({section, "gradients", setting, 0.0, tol, false,
                             std::string("not run: ") + e.what()});
    return;
  }
  const char* names[] = {"d q", "d k", vectorState ? "d x" : "d v", "d g", "d beta", "d u", "d h0"};
  const torch::Tensor kt[] = {ker.q, ker.k, ker.v, ker.g, ker.beta, ker.u, ker.h0};
  const torch::Tensor rt[] = {ref.q, ref.k, ref.v, ref.g, ref.beta, ref.u, ref.h0};
  for (int i = 0; i < 7; ++i) {
    if (!rt[i].defined()) continue;
    if (i == 3 && fixedDecay) {
      torch::Tensor contributions = gTokens.grad();
      compareTotal(report, section, names[i], setting, gradOf(kt[i]),
                   contributions.sum(std::vector<int64_t>{0, 1}), contributions, tol);
      continue;
    }
    compare(report, section, names[i], setting, gradOf(kt[i]), gradOf(rt[i]), tol);
  }
}

}  // namespace linac::verify::detail
