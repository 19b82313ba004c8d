#include "prologue/fused_recurrence.h"

#include "ops/l2_norm.h"
#include "ops/profile_scope.h"
#include "ops/recurrence_ops.h"
#include "prologue/map_op.h"
#ifdef LINAC_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "prologue/map_op_cuda.h"
#endif

#include <torch/torch.h>

#include <set>
#include <stdexcept>
#include <vector>

namespace linac::prologue {
namespace {

using kernels::DecayClass;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

[[noreturn]] void fail(const runtime::VariantKernels& variant, const std::string& message) {
  throw std::invalid_argument("fusedRecurrence(" + variant.name + "): " + message);
}

const torch::Tensor& operandNamed(const runtime::VariantKernels& variant, const Operands& operands,
                                  const std::string& name) {
  auto it = operands.find(name);
  if (it == operands.end() || !it->second.defined()) fail(variant, "operand '" + name + "' is missing");
  return it->second;
}

/// The kernels' L2 norm (kernels/common/fused.h), computed in fp32, returned in x's dtype: one
/// kernel each way on CUDA (ops/l2_norm.h), composed torch ops elsewhere.
torch::Tensor l2Normalize(const torch::Tensor& x) {
  if (ops::l2NormalizeSupported(x)) return ops::l2Normalize(x, kernels::kL2NormEps);
  const torch::Tensor x32 = x.to(torch::kFloat);
  return (x32 / torch::sqrt(x32.pow(2).sum(-1, true) + kernels::kL2NormEps)).to(x.scalar_type());
}

/// The operand names the plan reads: tiles, the computed roles' operands, the bonus.
std::set<std::string> usedNames(const runtime::VariantKernels& variant) {
  const runtime::FusedPlan& plan = variant.fused;
  std::set<std::string> names;
  for (const std::string* tile : {&plan.qTile, &plan.kTile, &plan.vTile, &plan.bonus})
    if (!tile->empty()) names.insert(*tile);
  auto addArgs = [&](const char* role) {
    if (const runtime::PrologueMap* map = variant.find(role)) names.insert(map->args.begin(), map->args.end());
  };
  if (plan.qTile.empty()) addArgs("q");
  if (plan.kTile.empty()) addArgs("k");
  if (variant.kind.decay != DecayClass::None) addArgs("decay");
  if (variant.kind.update == kernels::UpdateRule::Delta) addArgs("beta");
  return names;
}

/// Sizes every call derives from the v tile and the options.
struct Dims {
  int64_t batch, seqLen, heads, keyDim, valueDim;
};

Dims dimsOf(const runtime::VariantKernels& variant, const Operands& operands, const FusedOptions& o) {
  const torch::Tensor& v = operandNamed(variant, operands, variant.fused.vTile);
  if (v.dim() != 4) fail(variant, "the v tile '" + variant.fused.vTile + "' must be [B, T, H, dv]");
  if (o.keyDim <= 0) fail(variant, "options.keyDim must be positive, got " + std::to_string(o.keyDim));
  return {v.size(0), v.size(1), v.size(2), o.keyDim, v.size(3)};
}

/// The recurrence's inputs materialised from the operands: the maps for computed roles, torch's
/// L2 norm for normalised tiles; q, k, v in the v tile's dtype, g and beta fp32, all in kernel
/// layout. Differentiable with respect to the operands.
ops::RecurrenceInputs composeRoles(const runtime::VariantKernels& variant, const Operands& operands,
                                   const Dims& d) {
  const runtime::FusedPlan& plan = variant.fused;
  auto computed = [&](const std::string& role) {
    const runtime::PrologueMap* map = variant.find(role);
    if (!map) fail(variant, "the generated code has no '" + role + "' function; regenerate generated/");
    std::vector<torch::Tensor> args;
    for (const std::string& a : map->args) args.push_back(operandNamed(variant, operands, a));
    return applyMap(*map, args);
  };
  auto tile = [&](const std::string& name, bool normalize) {
    const torch::Tensor& t = operandNamed(variant, operands, name);
    return normalize ? l2Normalize(t) : t;
  };
  auto layout = [&](const std::string& role, const torch::Tensor& t) {
    return roleLayout(role, t, d.batch, d.seqLen, d.heads, d.keyDim, d.valueDim, variant);
  };
  const torch::Tensor v = operandNamed(variant, operands, plan.vTile);
  const auto dtype = v.scalar_type();
  ops::RecurrenceInputs in;
  in.v = v;
  in.q = layout("q", plan.qTile.empty() ? computed("q") : tile(plan.qTile, plan.normQ)).to(dtype);
  in.k = layout("k", plan.kTile.empty() ? computed("k") : tile(plan.kTile, plan.normK)).to(dtype);
  if (variant.kind.decay != DecayClass::None) in.g = layout("decay", computed("decay"));
  if (variant.kind.update == kernels::UpdateRule::Delta) in.beta = layout("beta", computed("beta"));
  if (!plan.bonus.empty())
    in.u = layout("u", operandNamed(variant, operands, plan.bonus)).to(torch::kFloat);
  return in;
}

#ifdef LINAC_HAVE_CUDA

kernels::DType kernelDtype(torch::ScalarType t) {
  if (t == torch::kFloat) return kernels::DType::F32;
  if (t == torch::kBFloat16) return kernels::DType::BF16;
  return kernels::DType::F16;
}

/// The operands of computed `role` as the kernel reads them: strided, broadcast by stride 0.
/// `channels` is the extent of the last dim the role varies over (dk, or 1 per token / head).
/// The first operand that is a full contiguous [B, T, H, dk] tensor of the kernel dtype becomes
/// the role's tile operand (prefetched like a q / k tile; kernels/common/fused.h).
kernels::RoleOperands roleOperands(const runtime::VariantKernels& variant, const Operands& operands,
                                   const std::string& role, const Dims& d, int64_t channels,
                                   const torch::Device& device, torch::ScalarType kernelType) {
  const runtime::PrologueMap* map = variant.find(role);
  if (!map) fail(variant, "the generated code has no '" + role + "' function; regenerate generated/");
  if (map->args.size() > size_t(kernels::kMaxRoleOperands))
    fail(variant, "'" + role + "' reads more operands than the fused kernel takes");
  const int64_t full[kernels::kFusedRank] = {d.batch, d.seqLen, d.heads, channels};
  kernels::RoleOperands out;
  out.count = int(map->args.size());
  for (size_t j = 0; j < map->args.size(); ++j) {
    const torch::Tensor& t = operandNamed(variant, operands, map->args[j]);
    const std::string what = "operand '" + map->args[j] + "' of '" + role + "'";
    if (t.dim() != kernels::kFusedRank || t.device() != device)
      fail(variant, what + " must be a 4-d field on " + device.str());
    if (!(t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16 ||
          t.scalar_type() == torch::kHalf))
      fail(variant, what + " must be fp32, bf16 or fp16");
    kernels::FusedOperand& x = out.operands[j];
    x.data = t.data_ptr();
    x.dtype = kernelDtype(t.scalar_type());
    for (int dim = 0; dim < kernels::kFusedRank; ++dim) {
      if (t.size(dim) != 1 && t.size(dim) != full[dim])
        fail(variant, what + " has size " + std::to_string(t.size(dim)) + " in dim " +
                          std::to_string(dim) + ", expected 1 or " + std::to_string(full[dim]));
      x.strides[dim] = t.size(dim) == 1 ? 0 : t.stride(dim);
    }
    const bool full = t.size(0) == d.batch && t.size(1) == d.seqLen && t.size(2) == d.heads &&
                      t.size(3) == channels;
    if (out.tile < 0 && channels > 1 && full && t.is_contiguous() && t.scalar_type() == kernelType)
      out.tile = int(j);
  }
  return out;
}

/// Forward: the fused chunk kernel. Backward: the roles recomposed from the saved operands, the
/// recurrence's backward kernels, and autograd through the roles.
struct FusedFunction : public torch::autograd::Function<FusedFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList tensors,
                               const std::optional<torch::Tensor>& h0_arg,
                               const std::optional<torch::Tensor>& cu_arg,
                               const runtime::VariantKernels* variant,
                               const std::vector<std::string>& names, const FusedOptions* options) {
    Operands operands;
    for (size_t i = 0; i < names.size(); ++i) operands[names[i]] = tensors[i];
    const runtime::FusedPlan& plan = variant->fused;
    const Dims d = dimsOf(*variant, operands, *options);
    const torch::Tensor v = operands.at(plan.vTile).contiguous();  // [B, T, H, dv]
    const torch::Device device = v.device();
    auto tileOf = [&](const std::string& name) {  // [B, T, H, dk] in v's dtype
      return name.empty() ? torch::Tensor() : operands.at(name).to(v.scalar_type()).contiguous();
    };
    const torch::Tensor q = tileOf(plan.qTile), k = tileOf(plan.kTile);
    const torch::Tensor h0 = h0_arg ? h0_arg->to(torch::kFloat).contiguous() : torch::Tensor();
    const torch::Tensor cu = cu_arg ? cu_arg->to(device, torch::kLong).contiguous() : torch::Tensor();
    const torch::Tensor u =
        plan.bonus.empty()
            ? torch::Tensor()
            : roleLayout("u", operands.at(plan.bonus), d.batch, d.seqLen, d.heads, d.keyDim,
                         d.valueDim, *variant).to(torch::kFloat).contiguous();  // [H, dk]
    const int64_t numSeqs = cu.defined() ? cu.numel() - 1 : d.batch;

    kernels::FusedForwardArgs a;
    a.shape = {d.batch, d.seqLen, d.heads, d.keyDim, d.valueDim,
               cu.defined() ? cu.data_ptr<int64_t>() : nullptr, numSeqs};
    a.dtype = kernelDtype(v.scalar_type());
    a.q = q.defined() ? q.data_ptr() : nullptr;
    a.k = k.defined() ? k.data_ptr() : nullptr;
    a.v = v.data_ptr();
    const auto type = v.scalar_type();
    if (plan.qTile.empty()) a.qRole = roleOperands(*variant, operands, "q", d, d.keyDim, device, type);
    if (plan.kTile.empty()) a.kRole = roleOperands(*variant, operands, "k", d, d.keyDim, device, type);
    if (variant->kind.decay != DecayClass::None)
      a.decay = roleOperands(*variant, operands, "decay", d,
                             variant->kind.decay == DecayClass::Diagonal ? d.keyDim : 1, device,
                             type);
    if (variant->kind.update == kernels::UpdateRule::Delta)
      a.beta = roleOperands(*variant, operands, "beta", d, 1, device, type);
    a.u = u.defined() ? u.data_ptr<float>() : nullptr;
    a.h0 = h0.defined() ? h0.data_ptr<float>() : nullptr;
    a.scale = float(options->scale);
    torch::Tensor o = torch::empty({d.batch, d.seqLen, d.heads, d.valueDim}, v.options());
    torch::Tensor ht;
    if (options->outputFinalState)
      ht = torch::empty({numSeqs, d.heads, d.keyDim, d.valueDim}, v.options().dtype(torch::kFloat));
    a.o = o.data_ptr();
    a.ht = ht.defined() ? ht.data_ptr<float>() : nullptr;
    launchFusedForward(runtime::Registry::findFusedForward(*variant), a, device);

    std::vector<torch::Tensor> saved = tensors.vec();
    saved.push_back(h0_arg.value_or(torch::Tensor()));
    saved.push_back(cu_arg.value_or(torch::Tensor()));
    ctx->save_for_backward(saved);
    ctx->saved_data["variant"] = reinterpret_cast<int64_t>(variant);
    ctx->saved_data["names"] = names;
    ctx->saved_data["key_dim"] = options->keyDim;
    ctx->saved_data["scale"] = options->scale;
    ctx->saved_data["chunk"] = options->chunk;
    ctx->set_materialize_grads(false);
    if (options->outputFinalState) return {o, ht};
    return {o};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto* variant = reinterpret_cast<const runtime::VariantKernels*>(ctx->saved_data["variant"].toInt());
    const variable_list saved = ctx->get_saved_variables();
    const auto names = ctx->saved_data["names"].toList();
    const size_t n = names.size();
    const torch::Tensor h0 = saved[n], cu = saved[n + 1];

    // The roles again, as a graph from fresh leaves over the saved operands.
    const torch::AutoGradMode enable(true);
    Operands operands;
    std::vector<torch::Tensor> leaves;
    for (size_t i = 0; i < n; ++i) {
      leaves.push_back(saved[i].detach().requires_grad_(ctx->needs_input_grad(i)));
      operands[names.get(i).toStringRef()] = leaves.back();
    }
    FusedOptions o;
    o.keyDim = ctx->saved_data["key_dim"].toInt();
    const Dims d = dimsOf(*variant, operands, o);
    const ops::RecurrenceInputs roles = composeRoles(*variant, operands, d);

    ops::RecurrenceInputs in{roles.q.detach(),    roles.k.detach(),
                             roles.v.detach(),    roles.g.defined() ? roles.g.detach() : roles.g,
                             roles.beta.defined() ? roles.beta.detach() : roles.beta,
                             roles.u.defined() ? roles.u.detach() : roles.u,
                             h0, cu.defined() ? cu.cpu() : cu};
    auto wants = [](const torch::Tensor& t) { return t.defined() && t.requires_grad(); };
    const ops::RecurrenceWanted wanted{wants(roles.q), wants(roles.k), wants(roles.v), wants(roles.g),
                                       wants(roles.beta), wants(roles.u),
                                       h0.defined() && ctx->needs_input_grad(n)};
    const ops::RecurrenceOptions options{variant->kind, ctx->saved_data["scale"].toDouble(),
                                         ctx->saved_data["chunk"].toInt(), false};
    const ops::RecurrenceGrads g = ops::recurrenceBackward(
        in, options, grads[0], grads.size() > 1 ? grads[1] : torch::Tensor(), wanted);

    // The chain rule through the roles to every operand that needs a gradient.
    std::vector<torch::Tensor> outputs, upstream, inputs;
    for (auto [role, grad] : {std::pair{roles.q, g.q}, std::pair{roles.k, g.k}, std::pair{roles.v, g.v},
                              std::pair{roles.g, g.g}, std::pair{roles.beta, g.beta},
                              std::pair{roles.u, g.u}})
      if (wants(role) && grad.defined()) {
        outputs.push_back(role);
        upstream.push_back(grad.to(role.scalar_type()));
      }
    for (const torch::Tensor& leaf : leaves)
      if (leaf.requires_grad()) inputs.push_back(leaf);
    variable_list result(n + 2);  // one per operand, then h0 and cu_seqlens
    if (!inputs.empty() && !outputs.empty()) {
      const variable_list d_inputs = torch::autograd::grad(outputs, inputs, upstream,
                                                           /*retain_graph=*/false,
                                                           /*create_graph=*/false,
                                                           /*allow_unused=*/true);
      size_t next = 0;
      for (size_t i = 0; i < n; ++i)
        if (leaves[i].requires_grad()) result[i] = d_inputs[next++];
    }
    result[n] = g.h0;
    // The remaining forward arguments (variant, names, options) take no gradient.
    result.resize(n + 5);
    return result;
  }
};

#endif  // LINAC_HAVE_CUDA

}  // namespace

torch::Tensor roleLayout(const std::string& role, const torch::Tensor& t, int64_t B, int64_t T,
                         int64_t H, int64_t dk, int64_t dv, const runtime::VariantKernels& variant) {
  if (variant.vectorState) return t.expand({B, T, H, dv}).reshape({B, T, H * dv});
  if (role == "q" || role == "k") return t.expand({B, T, H, dk}).contiguous();
  if (role == "v") return t.expand({B, T, H, dv}).contiguous();
  if (role == "beta") return t.expand({B, T, H, 1}).reshape({B, T, H});
  if (role == "u") return t.expand({1, 1, H, dk}).reshape({H, dk});
  if (role != "decay") throw std::invalid_argument("roleLayout: no kernel layout for role '" + role + "'");
  switch (variant.kind.decay) {
  case DecayClass::Fixed: return t.expand({1, 1, H, 1}).reshape({H});
  case DecayClass::Scalar: return t.expand({B, T, H, 1}).reshape({B, T, H});
  case DecayClass::Diagonal: return t.expand({B, T, H, dk}).contiguous();
  case DecayClass::None: break;
  }
  return torch::Tensor();
}

bool runsInKernel(const runtime::VariantKernels& variant, const Operands& operands,
                  const FusedOptions& options) {
#ifdef LINAC_HAVE_CUDA
  if (options.mode == FusedMode::Composed || !variant.fused.available ||
      !runtime::Registry::findFusedForward(variant))
    return false;
  const runtime::FusedPlan& plan = variant.fused;
  if (options.mode == FusedMode::Automatic && (plan.qTile.empty() || plan.kTile.empty()))
    return false;  // computed q / k: measured slower in the kernel (fused_recurrence.h)
  if (options.mode == FusedMode::Automatic && torch::GradMode::is_enabled()) {
    if (options.h0.defined() && options.h0.requires_grad()) return false;
    for (const std::string& name : usedNames(variant)) {
      auto it = operands.find(name);
      if (it != operands.end() && it->second.defined() && it->second.requires_grad()) return false;
    }
  }
  auto v = operands.find(variant.fused.vTile);
  if (v == operands.end() || !v->second.defined() || !v->second.is_cuda() || v->second.dim() != 4)
    return false;
  const auto dtype = v->second.scalar_type();
  const bool dkTaken = options.keyDim == 64 || options.keyDim == 128 || options.keyDim == 256;
  if (!(dtype == torch::kFloat || dtype == torch::kBFloat16) || !dkTaken || v->second.size(3) % 64 != 0)
    return false;
  if (options.mode == FusedMode::Automatic) {  // composed where it reaches the Hopper stages
    kernels::RecurrenceShape shape;
    shape.batch = v->second.size(0);
    shape.seq_len = v->second.size(1);
    shape.heads = v->second.size(2);
    shape.key_dim = options.keyDim;
    shape.value_dim = v->second.size(3);
    if (kernels::cuda::chunkForwardOnHopper(variant.kind, kernelDtype(dtype), shape)) return false;
  }
  return true;
#else
  (void)variant, (void)operands, (void)options;
  return false;
#endif
}

std::pair<torch::Tensor, torch::Tensor> fusedRecurrence(const runtime::VariantKernels& variant,
                                                        const Operands& operands,
                                                        const FusedOptions& options) {
  if (!variant.fused.available || variant.vectorState)
    fail(variant, "its generated code has no fused plan (see the comment in its _register.cpp)");
  const Dims d = dimsOf(variant, operands, options);
#ifdef LINAC_HAVE_CUDA
  if (runsInKernel(variant, operands, options)) {
    std::vector<std::string> names;
    std::vector<torch::Tensor> tensors;
    for (const std::string& name : usedNames(variant)) {  // only what the kernel reads is saved
      names.push_back(name);
      tensors.push_back(operandNamed(variant, operands, name));
    }
    auto optional = [](const torch::Tensor& t) {
      return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt;
    };
    // As a TensorList, so autograd gives each operand an edge (a std::vector would be opaque).
    const variable_list out = ops::scope::profiled(ops::scope::kMixerKernel, [&] {
      return FusedFunction::apply(at::TensorList(tensors), optional(options.h0), optional(options.cuSeqlens),
                                  &variant, names, &options);
    });
    return {out[0], options.outputFinalState ? out[1] : torch::Tensor()};
  }
#endif
  const ops::RecurrenceInputs roles =
      ops::scope::profiled(ops::scope::kPrologueEpilogue, [&] { return composeRoles(variant, operands, d); });
  ops::RecurrenceOptions opt{variant.kind, options.scale, options.chunk, options.outputFinalState};
  return ops::scope::profiled(ops::scope::kMixerKernel, [&] {
    return ops::recurrence({roles.q, roles.k, roles.v, roles.g, roles.beta, roles.u, options.h0, options.cuSeqlens},
                           opt);
  });
}

}  // namespace linac::prologue
