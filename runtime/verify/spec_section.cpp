// Sections "spec" and "fused": end to end from the spec's raw inputs and parameters, against the
// oracle evaluating the spec's expressions in float64 (oracle/expr_eval.h).
//   spec   the compiled prologue (generated functions, derivatives from linac-differentiate)
//          materialises every role, then the kernels run (ops::recurrence / ops::scan);
//   fused  prologue::fusedRecurrence from the raw operands: on CUDA the prologue computed inside
//          the chunk kernel (q / k L2-normalised there), elsewhere composed; the setting says which.
#include "oracle/expr_eval.h"
#include "oracle/oracle.h"
#include "prologue/fused_recurrence.h"
#include "prologue/map_op.h"
#include "model/roles.h"
#include "verify/sections.h"

#include <stdexcept>

namespace linac::verify::detail {
namespace {

/// Layer index and count the structural names take during verification.
constexpr double kLayer = 1.0;
constexpr double kNumLayers = 4.0;
/// Parameters initialised to constants get this much N(0,1) noise, so gradients are generic.
constexpr double kInitNoise = 0.1;

/// The verify shape as the model's per-head sizes (the width is not used by field layouts).
model::MixerDims dims(const Shape& s) { return {s.heads * s.valueDim, s.heads, s.keyDim, s.valueDim}; }

/// The runtime's name of a spec extent (verify reads the spec, the model the registry).
runtime::Extent extentOf(spec::Extent e) {
  switch (e) {
  case spec::Extent::Scalar: return runtime::Extent::Scalar;
  case spec::Extent::Head: return runtime::Extent::Head;
  case spec::Extent::Key: return runtime::Extent::Key;
  case spec::Extent::Value: return runtime::Extent::Value;
  case spec::Extent::Hidden: return runtime::Extent::Hidden;
  }
  throw std::invalid_argument("verify: unknown extent");
}

std::vector<int64_t> fieldShape(spec::Extent e, bool perToken, const Shape& s, const std::string& name) {
  return model::fieldShape(extentOf(e), perToken ? s.batch : 1, perToken ? s.seqLen : 1, dims(s), name);
}

torch::Tensor drawParam(const spec::ParamSpec& p, const std::vector<int64_t>& shape) {
  const auto& init = p.init;
  auto uniform = [&](double a, double b) { return a + (b - a) * torch::rand(shape, torch::kFloat64); };
  auto noise = [&] { return kInitNoise * torch::randn(shape, torch::kFloat64); };
  switch (init.kind) {
  case spec::InitKind::Zeros: return noise();
  case spec::InitKind::Ones: return 1.0 + noise();
  case spec::InitKind::Constant: return init.a + noise();
  case spec::InitKind::Normal: return init.a * torch::randn(shape, torch::kFloat64);
  case spec::InitKind::Uniform: return uniform(init.a, init.b);
  case spec::InitKind::LogUniform: return torch::log(uniform(init.a, init.b));
  case spec::InitKind::DtBias: {
    torch::Tensor dt = torch::exp(uniform(std::log(init.a), std::log(init.b)));
    return dt + torch::log(-torch::expm1(-dt));  // inverse softplus
  }
  }
  return noise();
}

/// The raw values of one verify run, on both sides: float32 kernel-side leaves and float64
/// oracle-side leaves holding the same (float32-representable) numbers.
struct Leaves {
  std::map<std::string, torch::Tensor> kernel, oracle;

  void add(const std::string& name, const torch::Tensor& master, bool trainable) {
    torch::Tensor k = master.to(torch::kFloat32).detach().requires_grad_(trainable);
    kernel[name] = k;
    oracle[name] = k.detach().to(torch::kFloat64).requires_grad_(trainable);
  }
};

torch::Tensor unitRows(const torch::Tensor& t) { return t / t.norm(2, -1, true); }

/// The fused kernels' L2 norm (kernels/common/fused.h), with its epsilon.
torch::Tensor epsUnitRows(const torch::Tensor& t) {
  return t / torch::sqrt(t.pow(2).sum(-1, true) + double(kernels::kL2NormEps));
}

class SpecRun {
public:
  SpecRun(const spec::VariantSpec& spec, const runtime::VariantKernels& kernels, const Shape& s)
      : spec_(spec), kernels_(kernels), s_(s) {}

  void drawLeaves() {
    for (const auto& in : spec_.inputs)
      leaves_.add(in.name, torch::randn(fieldShape(in.extent, true, s_, in.name), torch::kFloat64), true);
    for (const auto& p : spec_.params)
      leaves_.add(p.name, drawParam(p, fieldShape(p.extent, false, s_, p.name)), true);
    leaves_.add("head", torch::arange(s_.heads, torch::kFloat64).view({1, 1, s_.heads, 1}), false);
    leaves_.add("layer", torch::full({1, 1, 1, 1}, kLayer, torch::kFloat64), false);
    leaves_.add("num_layers", torch::full({1, 1, 1, 1}, kNumLayers, torch::kFloat64), false);
    // What the expressions see: inputs marked l2norm are normalised first (both sides).
    kernelEnv_ = leaves_.kernel;
    oracleEnv_ = leaves_.oracle;
    // Parameters are broadcast over every token, so their gradients are totals over B x T. The
    // oracle's expressions see a per-token copy of each (same values), whose gradient holds the
    // per-token contributions (compareTotal). Not for a fixed decay class: its role is per head.
    if (kernels_.kind.decay != kernels::DecayClass::Fixed)
      for (const auto& p : spec_.params) {
        torch::Tensor leaf = leaves_.oracle.at(p.name);
        std::vector<int64_t> shape = leaf.sizes().vec();
        shape[0] = s_.batch;
        shape[1] = s_.seqLen;
        perToken_[p.name] = leaf.detach().expand(shape).clone().requires_grad_(true);
        oracleEnv_[p.name] = perToken_[p.name];
      }
    oracleEnvRaw_ = oracleEnv_;
    for (const auto& in : spec_.inputs)
      if (in.l2norm) {
        kernelEnv_[in.name] = unitRows(kernelEnv_[in.name]);
        oracleEnv_[in.name] = unitRows(oracleEnv_[in.name]);
      }
  }

  /// The value of a recurrence role on the kernel side.
  torch::Tensor kernelRole(const std::string& role, const spec::ExprPtr& expr) {
    if (const runtime::PrologueMap* m = kernels_.find(role)) {
      std::vector<torch::Tensor> operands;
      for (const auto& a : m->args) operands.push_back(kernelEnv_.at(a));
      return prologue::applyMap(*m, operands);
    }
    if (expr->kind == spec::ExprKind::Ref && kernelEnv_.count(expr->name)) return kernelEnv_.at(expr->name);
    throw std::runtime_error("verify: the generated code of '" + spec_.name + "' has no '" + role +
                             "' prologue although the spec computes one; regenerate generated/");
  }

  torch::Tensor oracleRole(const spec::ExprPtr& expr) {
    return oracle::evalExpr(*expr, oracleEnv_, spec_.defs);
  }

  /// Reshapes a role value to what the kernels take (DESIGN.md's layouts).
  torch::Tensor toKernelLayout(const std::string& role, const torch::Tensor& t) const {
    return model::toKernelLayout(role, t, s_.batch, s_.seqLen, dims(s_), kernels_).contiguous();
  }

  /// What the fused op and the oracle read for it: the raw leaves, the q / k / v tiles rounded to
  /// `type` on both sides; inputs marked l2norm normalised (on the kernel side only those the
  /// kernel does not normalise itself); parameters per token on the oracle side.
  std::pair<prologue::Operands, std::map<std::string, torch::Tensor>> fusedEnvs(
      torch::ScalarType type, const torch::Device& dev) const {
    const runtime::FusedPlan& plan = kernels_.fused;
    prologue::Operands ker;
    std::map<std::string, torch::Tensor> ref = oracleEnvRaw_;
    for (const auto& [name, leaf] : leaves_.kernel) {
      const bool tile = name == plan.qTile || name == plan.kTile || name == plan.vTile;
      ker[name] = (tile ? leaf.to(type) : leaf).to(dev);
      if (tile) ref[name] = ref.at(name).to(type).to(torch::kFloat64);
    }
    for (const auto& in : spec_.inputs) {
      if (!in.l2norm) continue;
      ref[in.name] = epsUnitRows(ref.at(in.name));
      const bool inKernel = (plan.normQ && in.name == plan.qTile) || (plan.normK && in.name == plan.kTile);
      if (!inKernel) ker[in.name] = epsUnitRows(ker.at(in.name).to(torch::kFloat)).to(ker.at(in.name).scalar_type());
    }
    return {ker, ref};
  }

  const Leaves& leaves() const { return leaves_; }
  /// The oracle's per-token copy of parameter `name` (undefined when there is none).
  torch::Tensor perToken(const std::string& name) const {
    auto it = perToken_.find(name);
    return it == perToken_.end() ? torch::Tensor() : it->second;
  }

private:
  const spec::VariantSpec& spec_;
  const runtime::VariantKernels& kernels_;
  Shape s_;
  Leaves leaves_;
  std::map<std::string, torch::Tensor> kernelEnv_, oracleEnv_, oracleEnvRaw_, perToken_;
};

/// Compares the gradient of every trainable leaf (parameters as totals over tokens).
void compareLeafGrads(Report& report, const std::string& section, const std::string& setting,
                      const SpecRun& run, double tol) {
  for (const auto& [name, leaf] : run.leaves().kernel) {
    if (!leaf.requires_grad()) continue;
    const torch::Tensor& refLeaf = run.leaves().oracle.at(name);
    const torch::Tensor tokens = run.perToken(name);
    if (tokens.defined() && tokens.grad().defined()) {
      torch::Tensor total = tokens.grad().sum(std::vector<int64_t>{0, 1}, /*keepdim=*/true);
      if (refLeaf.grad().defined()) total = total + refLeaf.grad();  // uses outside expressions (bonus)
      compareTotal(report, section, "d " + name, setting, leaf.grad(), total, tokens.grad(), tol);
      continue;
    }
    compare(report, section, "d " + name, setting, leaf.grad(), refLeaf.grad(), tol);
  }
}

}  // namespace

void specSection(Report& report, const spec::VariantSpec& spec, const runtime::VariantKernels& kernels,
                 const Shape& s, kernels::DType dtype, const Options& options, std::ostream& log) {
  const std::string setting = std::string(dtypeName(dtype)) + " " + s.text();
  log << "  spec        " << setting << std::endl;  // flushed: a run cut short shows where it was
  const double tol = tolerance(dtype);
  const auto type = scalarType(dtype);
  const auto dev = device(options);
  const auto& r = spec.recurrence;
  const bool vector = kernels.vectorState;
  const bool decayed = kernels.kind.decay != kernels::DecayClass::None && r.decay;

  SpecRun run(spec, kernels, s);
  run.drawLeaves();

  // Roles on both sides; q, k, v rounded to the kernel dtype on both.
  struct Role { std::string name; spec::ExprPtr expr; bool rounded; };
  std::vector<Role> roles = {{"v", r.v, true}};
  if (!vector) {
    roles.push_back({"q", r.q, true});
    roles.push_back({"k", r.k, true});
  }
  if (decayed) roles.push_back({"decay", r.decay, false});
  if (r.update == spec::UpdateKind::Delta) roles.push_back({"beta", r.beta, false});
  std::map<std::string, torch::Tensor> ker, ref;
  for (const Role& role : roles) {
    torch::Tensor k = run.toKernelLayout(role.name, run.kernelRole(role.name, role.expr));
    torch::Tensor o = run.toKernelLayout(role.name, run.oracleRole(role.expr));
    ker[role.name] = (role.rounded ? k.to(type) : k).to(dev);
    ref[role.name] = role.rounded ? o.to(type).to(torch::kFloat64) : o;
  }
  if (r.readout == spec::ReadoutKind::ExclusiveBonus) {
    ker["u"] = run.toKernelLayout("u", run.leaves().kernel.at(r.bonus)).to(dev);
    ref["u"] = run.toKernelLayout("u", run.leaves().oracle.at(r.bonus));
  }
  const int64_t N = s.batch;
  torch::Tensor h0 = vector ? torch::randn({N, s.heads * s.valueDim}, torch::kFloat64)
                            : torch::randn({N, s.heads, s.keyDim, s.valueDim}, torch::kFloat64);
  torch::Tensor h0Ker = h0.to(dev, torch::kFloat32).requires_grad_(true);
  torch::Tensor h0Ref = h0Ker.detach().to(torch::kCPU, torch::kFloat64).requires_grad_(true);
  auto get = [](std::map<std::string, torch::Tensor>& m, const char* k) {
    auto it = m.find(k);
    return it == m.end() ? torch::Tensor() : it->second;
  };

  const double scale = vector ? 1.0 : (r.scale ? *r.scale : 1.0 / std::sqrt(double(s.keyDim)));
  const int64_t chunk = options.chunk ? options.chunk : kernels.chunk;
  torch::Tensor o, ht, oRef, htRef;
  if (vector) {
    std::tie(o, ht) = ops::scan(ker["v"], ker["decay"], h0Ker, torch::Tensor(), true);
    auto out = oracle::scan(ref["v"], ref["decay"], h0Ref);
    oRef = out.h;
    htRef = out.ht;
  } else {
    ops::RecurrenceOptions opt{kernels.kind, scale, chunk, true};
    std::tie(o, ht) = ops::recurrence(
        {ker["q"], ker["k"], ker["v"], get(ker, "decay"), get(ker, "beta"), get(ker, "u"), h0Ker, {}}, opt);
    oracle::RecurrenceInputs oi{ref["q"], ref["k"], ref["v"], get(ref, "decay"), get(ref, "beta"),
                                get(ref, "u"), h0Ref, scale, {}};
    auto out = oracle::recurrence(kernels.kind, oi);
    oRef = out.o;
    htRef = out.ht;
  }
  compare(report, "spec", "o", setting, o, oRef, tol);
  compare(report, "spec", "ht", setting, ht, htRef, tol);

  // The upstream gradient reaches the kernel in o's dtype: give the oracle the same values.
  torch::Tensor dO = torch::randn(oRef.sizes(), torch::kFloat64).to(o.scalar_type()).to(torch::kFloat64);
  torch::Tensor dHt = torch::randn(htRef.sizes(), torch::kFloat64);
  (oRef * dO).sum().add((htRef * dHt).sum()).backward();
  try {
    ((o.to(torch::kFloat64) * dO.to(dev)).sum() + (ht.to(torch::kFloat64) * dHt.to(dev)).sum()).backward();
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("not implemented") == std::string::npos) throw;
    report.checks.push_back({"spec", "gradients", setting, 0.0, tol, false, std::string("not run: ") + e.what()});
    return;
  }
  compareLeafGrads(report, "spec", setting, run, tol);
  compare(report, "spec", "d h0", setting, h0Ker.grad(), h0Ref.grad(), tol);
}

void fusedSection(Report& report, const spec::VariantSpec& spec, const runtime::VariantKernels& kernels,
                  const Shape& s, kernels::DType dtype, const Options& options, std::ostream& log) {
  if (!kernels.fused.available || kernels.vectorState) return;
  const double tol = tolerance(dtype);
  const auto type = scalarType(dtype);
  const auto dev = device(options);
  const auto& r = spec.recurrence;

  SpecRun run(spec, kernels, s);
  run.drawLeaves();
  auto [ker, ref] = run.fusedEnvs(type, dev);
  const double scale = r.scale ? *r.scale : 1.0 / std::sqrt(double(s.keyDim));
  prologue::FusedOptions opt;
  opt.keyDim = s.keyDim;
  opt.scale = scale;
  opt.chunk = options.chunk ? options.chunk : kernels.chunk;
  opt.outputFinalState = true;
  opt.mode = prologue::FusedMode::InKernel;  // the fused forward and its backward, where it can run
  torch::Tensor h0 = torch::randn({s.batch, s.heads, s.keyDim, s.valueDim}, torch::kFloat64);
  opt.h0 = h0.to(dev, torch::kFloat32).requires_grad_(true);
  torch::Tensor h0Ref = opt.h0.detach().to(torch::kCPU, torch::kFloat64).requires_grad_(true);
  const bool inKernel = prologue::runsInKernel(kernels, ker, opt);
  const std::string setting = std::string(dtypeName(dtype)) + " " + s.text() +
                              (inKernel ? " in-kernel" : " composed");
  log << "  fused       " << setting << std::endl;

  auto [o, ht] = prologue::fusedRecurrence(kernels, ker, opt);
  auto layout = [&](const std::string& role, const torch::Tensor& t) {
    return prologue::roleLayout(role, t, s.batch, s.seqLen, s.heads, s.keyDim, s.valueDim, kernels);
  };
  auto eval = [&](const spec::ExprPtr& e) { return oracle::evalExpr(*e, ref, spec.defs); };
  const bool decayed = kernels.kind.decay != kernels::DecayClass::None && r.decay;
  // q, k, v as the kernel holds them: in its dtype (fusedRecurrence's semantics).
  auto rounded = [&](const torch::Tensor& t) { return t.to(type).to(torch::kFloat64); };
  oracle::RecurrenceInputs oi{rounded(layout("q", eval(r.q))),
                              rounded(layout("k", eval(r.k))),
                              rounded(layout("v", eval(r.v))),
                              decayed ? layout("decay", eval(r.decay)) : torch::Tensor(),
                              r.update == spec::UpdateKind::Delta ? layout("beta", eval(r.beta)) : torch::Tensor(),
                              r.bonus.empty() ? torch::Tensor()
                                              : layout("u", run.leaves().oracle.at(r.bonus)),
                              h0Ref,
                              scale,
                              {}};
  const auto out = oracle::recurrence(kernels.kind, oi);
  compare(report, "fused", "o", setting, o, out.o, tol);
  compare(report, "fused", "ht", setting, ht, out.ht, tol);

  torch::Tensor dO = torch::randn(out.o.sizes(), torch::kFloat64).to(o.scalar_type()).to(torch::kFloat64);
  torch::Tensor dHt = torch::randn(out.ht.sizes(), torch::kFloat64);
  (out.o * dO).sum().add((out.ht * dHt).sum()).backward();
  ((o.to(torch::kFloat64) * dO.to(dev)).sum() + (ht.to(torch::kFloat64) * dHt.to(dev)).sum()).backward();
  compareLeafGrads(report, "fused", setting, run, tol);
  compare(report, "fused", "d h0", setting, opt.h0.grad(), h0Ref.grad(), tol);
}

}  // namespace linac::verify::detail
