#include "bench/bench.h"

#include "bench/timer.h"
#include "ops/recurrence_ops.h"
#include "prologue/fused_recurrence.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <iomanip>
#include <stdexcept>

namespace linac::bench {
namespace {

torch::ScalarType scalarType(const std::string& dtype) {
  if (dtype == "bf16") return torch::kBFloat16;
  if (dtype == "fp16") return torch::kFloat16;
  if (dtype == "fp32") return torch::kFloat32;
  throw std::invalid_argument("bench: unknown dtype '" + dtype + "'; valid: bf16, fp16, fp32");
}

bool isNotImplemented(const std::exception& e) {
  return std::string(e.what()).find("not implemented") != std::string::npos;
}

/// The backward of `out` for the cotangent `dOut` into `inputs` (the leaves that want gradients),
/// as training runs it: the gradients are returned, not added into the leaves' .grad. A timed
/// `out.backward(dOut)` would add each gradient into the previous iteration's, one elementwise
/// pass per input (about 1 GB at GLA's B8 T4096 H8 D128, ~0.3 ms) that training never runs and
/// fla's timing leaves out (bench/fla_bench.py: do_bench with grad_to_none).
void backwardInto(const torch::Tensor& out, const std::vector<torch::Tensor>& inputs, const torch::Tensor& dOut) {
  torch::autograd::grad({out}, inputs, {dOut}, /*retain_graph=*/false, /*create_graph=*/false,
                        /*allow_unused=*/true);
}

/// The tensors of `ts` that require gradients.
std::vector<torch::Tensor> wantingGrad(std::initializer_list<torch::Tensor> ts) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& t : ts)
    if (t.defined() && t.requires_grad()) out.push_back(t);
  return out;
}

/// Times `fn`, or records why it cannot run on this backend.
Timing timeOrSkip(const std::string& what, double floorMs, const std::function<void()>& fn,
                  const Options& o) {
  Timing t{what, 0.0, floorMs, true, ""};
  try {
    t.medianMs = medianMs(fn, o.backend == "cuda", o.warmup, o.iters);
  } catch (const std::exception& e) {
    if (!isNotImplemented(e)) throw;
    t.ran = false;
    t.note = e.what();
  }
  return t;
}

/// The spec's raw operands at the bench shape, by name (field layout [B|1, T|1, H|1, d|1]):
/// inputs N(0, 1) in the bench dtype, parameters 0.1 N(0, 1) in fp32, the structural names.
prologue::Operands rawOperands(const spec::VariantSpec& spec, const Options& o,
                               const torch::Device& dev, torch::ScalarType type) {
  const int64_t B = o.batch, T = o.seqLen, H = o.heads, D = o.headDim;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  auto width = [&](spec::Extent e) -> std::pair<int64_t, int64_t> {  // (heads, channels)
    switch (e) {
    case spec::Extent::Scalar: return {1, 1};
    case spec::Extent::Head: return {H, 1};
    case spec::Extent::Key:
    case spec::Extent::Value: return {H, D};
    case spec::Extent::Hidden: break;
    }
    throw std::invalid_argument("bench: extent hidden has no field layout");
  };
  prologue::Operands ops;
  for (const auto& in : spec.inputs) {
    auto [h, c] = width(in.extent);
    ops[in.name] = torch::randn({B, T, h, c}, f32).to(type);
  }
  for (const auto& p : spec.params) {
    auto [h, c] = width(p.extent);
    ops[p.name] = 0.1 * torch::randn({1, 1, h, c}, f32);
  }
  ops["head"] = torch::arange(H, f32).view({1, 1, H, 1});
  ops["layer"] = torch::full({1, 1, 1, 1}, 1.0, f32);
  ops["num_layers"] = torch::full({1, 1, 1, 1}, 4.0, f32);
  return ops;
}

/// Forward and forward+backward from the raw operands, fused into the kernel and composed.
void rawTimings(const spec::VariantSpec& spec, const runtime::VariantKernels& kernels,
                const Options& o, const torch::Device& dev, torch::ScalarType type,
                std::vector<Timing>& out) {
  if (!kernels.fused.available || kernels.vectorState) return;
  const prologue::Operands raw = rawOperands(spec, o, dev, type);
  prologue::Operands leaves;
  for (const auto& [name, t] : raw)
    leaves[name] = t.is_floating_point() && name != "head" && name != "layer" && name != "num_layers"
                       ? t.detach().requires_grad_(true)
                       : t;
  const torch::Tensor dO =
      torch::randn({o.batch, o.seqLen, o.heads, o.headDim}, torch::TensorOptions().device(dev)).to(type);
  std::vector<torch::Tensor> wanting;
  for (const auto& [name, t] : leaves)
    if (t.requires_grad()) wanting.push_back(t);
  for (bool inKernel : {true, false}) {
    prologue::FusedOptions opt;
    opt.keyDim = o.headDim;
    opt.scale = 1.0 / std::sqrt(double(o.headDim));
    opt.chunk = kernels.chunk;
    opt.mode = inKernel ? prologue::FusedMode::InKernel : prologue::FusedMode::Composed;
    const bool fused = prologue::runsInKernel(kernels, raw, opt);
    if (inKernel && !fused) continue;  // CPU, fp16, other head dims: only the composed rows
    const std::string how = fused ? "fused" : "composed";
    out.push_back(timeOrSkip(how + " fwd", 0.0, [&] {
      torch::NoGradGuard ng;
      prologue::fusedRecurrence(kernels, raw, opt);
    }, o));
    out.push_back(timeOrSkip(how + " fwd+bwd", 0.0, [&] {
      auto [o_, ht] = prologue::fusedRecurrence(kernels, leaves, opt);
      backwardInto(o_, wanting, dO);
    }, o));
  }
}

}  // namespace

std::vector<Timing> run(const spec::VariantSpec& spec, const runtime::VariantKernels& kernels,
                        const Options& o) {
  if (o.backend == "cuda" && !torch::cuda::is_available())
    throw std::invalid_argument("bench: --backend cuda, but no CUDA device is available");
  const auto dev = o.backend == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const auto type = scalarType(o.dtype);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  const int64_t B = o.batch, T = o.seqLen, H = o.heads, D = o.headDim;
  const double elem = torch::elementSize(type);
  auto floorMs = [&](double bytes) { return bytes / o.bandwidth * 1e3; };
  std::vector<Timing> out;
  torch::manual_seed(0);

  if (kernels.vectorState) {  // HGRN: one channel per hidden unit, D = H * headDim
    const int64_t C = H * D;
    torch::Tensor x = torch::randn({B, T, C}, f32).to(type);
    torch::Tensor g = torch::log_sigmoid(torch::randn({B, T, C}, f32));
    const double n = double(B * T * C);
    out.push_back(timeOrSkip("fwd", floorMs(n * (2 * elem + 4)), [&] {
      torch::NoGradGuard ng;
      ops::scan(x, g, torch::Tensor(), torch::Tensor(), false);
    }, o));
    torch::Tensor xg = x.detach().requires_grad_(true), gg = g.detach().requires_grad_(true);
    torch::Tensor dh = torch::randn({B, T, C}, f32).to(type);
    out.push_back(timeOrSkip("fwd+bwd", floorMs(n * (5 * elem + 8)), [&] {
      auto [h, ht] = ops::scan(xg, gg, torch::Tensor(), torch::Tensor(), false);
      backwardInto(h, {xg, gg}, dh);
    }, o));
    return out;
  }

  const auto& kind = kernels.kind;
  const bool delta = kind.update == kernels::UpdateRule::Delta;
  auto keys = [&] {
    torch::Tensor k = torch::randn({B, T, H, D}, f32);
    return (delta ? k / k.norm(2, -1, true) : k).to(type);
  };
  ops::RecurrenceInputs in{keys(), keys(), torch::randn({B, T, H, D}, f32).to(type)};
  double gBytes = 0;
  switch (kind.decay) {
  case kernels::DecayClass::None: break;
  case kernels::DecayClass::Fixed: in.g = torch::log_sigmoid(torch::randn({H}, f32)); break;
  case kernels::DecayClass::Scalar:
    in.g = torch::log_sigmoid(torch::randn({B, T, H}, f32));
    gBytes = 4.0 * B * T * H;
    break;
  case kernels::DecayClass::Diagonal:
    in.g = torch::log_sigmoid(torch::randn({B, T, H, D}, f32));
    gBytes = 4.0 * B * T * H * D;
    break;
  }
  if (delta) in.beta = torch::sigmoid(torch::randn({B, T, H}, f32));
  if (kind.readout == kernels::Readout::ExclusiveBonus) in.u = torch::randn({H, D}, f32);
  const double betaBytes = delta ? 4.0 * B * T * H : 0.0;
  const double tensorBytes = elem * B * T * H * D;  // one of q, k, v, o
  ops::RecurrenceOptions opt{kind, 1.0 / std::sqrt(double(D)), kernels.chunk, false};

  // fwd reads q, k, v, g, beta and writes o; bwd also reads do and writes dq, dk, dv, dg, dbeta.
  out.push_back(timeOrSkip("fwd", floorMs(4 * tensorBytes + gBytes + betaBytes), [&] {
    torch::NoGradGuard ng;
    ops::recurrence(in, opt);
  }, o));
  ops::RecurrenceInputs grad = in;  // d_g only where training learns the decay
  for (torch::Tensor* t : {&grad.q, &grad.k, &grad.v, &grad.g, &grad.beta})
    if (t->defined() && (t != &grad.g || kernels.learnsDecay())) *t = t->detach().requires_grad_(true);
  torch::Tensor dO = torch::randn({B, T, H, D}, f32).to(type);
  const std::vector<torch::Tensor> wanting = wantingGrad({grad.q, grad.k, grad.v, grad.g, grad.beta});
  out.push_back(timeOrSkip("fwd+bwd", floorMs(9 * tensorBytes + 3 * (gBytes + betaBytes)), [&] {
    auto [o_, ht] = ops::recurrence(grad, opt);
    backwardInto(o_, wanting, dO);
  }, o));

  // One decode step for B sequences: reads q, k, v and the state, writes o and the state.
  ops::RecurrenceInputs step{in.q.select(1, 0).contiguous(), in.k.select(1, 0).contiguous(),
                             in.v.select(1, 0).contiguous()};
  if (in.g.defined()) step.g = in.g.dim() == 1 ? in.g : in.g.select(1, 0).contiguous();
  if (in.beta.defined()) step.beta = in.beta.select(1, 0).contiguous();
  step.u = in.u;
  torch::Tensor state = torch::zeros({B, H, D, D}, f32);
  out.push_back(timeOrSkip("step", floorMs(2.0 * 4 * B * H * D * D), [&] {
    torch::NoGradGuard ng;
    ops::recurrenceStep(step, state, opt);
  }, o));
  rawTimings(spec, kernels, o, dev, type, out);
  return out;
}

namespace {

// One --json line: the call's settings and the timing (median_ms null when the op did not run).
std::string jsonLine(const std::string& name, const Options& o, const Timing& t) {
  nlohmann::ordered_json j;
  j["variant"] = name;
  j["op"] = t.what;
  j["backend"] = o.backend;
  j["dtype"] = o.dtype;
  j["B"] = o.batch;
  j["T"] = o.seqLen;
  j["H"] = o.heads;
  j["D"] = o.headDim;
  j["median_ms"] = t.ran ? nlohmann::ordered_json(t.medianMs) : nlohmann::ordered_json(nullptr);
  j["floor_ms"] = t.floorMs;
  if (!t.ran) j["note"] = t.note;
  return j.dump() + "\n";
}

}  // namespace

void print(const std::string& name, const Options& o, const std::vector<Timing>& timings,
           std::ostream& os, std::ostream* json) {
  os << "linac bench " << name << " (" << o.backend << ", " << o.dtype << ", B=" << o.batch << " T=" << o.seqLen
     << " H=" << o.heads << " D=" << o.headDim << ", median of " << o.iters << ")\n";
  os << std::left << std::setw(18) << "op" << std::right << std::setw(12) << "median ms" << std::setw(12)
     << "floor ms" << std::setw(10) << "x floor" << "\n";
  for (const auto& t : timings) {
    os << std::left << std::setw(18) << t.what << std::right << std::fixed << std::setprecision(3);
    if (t.ran && t.floorMs > 0.0)
      os << std::setw(12) << t.medianMs << std::setw(12) << t.floorMs << std::setw(10) << std::setprecision(1)
         << t.medianMs / t.floorMs << "\n";
    else if (t.ran)  // from raw operands: no floor of its own (compare with the fwd rows)
      os << std::setw(12) << t.medianMs << std::setw(12) << "-" << std::setw(10) << "-" << "\n";
    else
      os << std::setw(12) << "-" << std::setw(12) << t.floorMs << std::setw(10) << "-" << "  (" << t.note << ")\n";
    os << std::defaultfloat;
    if (json) *json << jsonLine(name, o, t);
  }
}

}  // namespace linac::bench
