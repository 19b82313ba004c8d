#include "linac/Emit/FusedRoles.h"

#include "linac/Spec/ExprWalk.h"

#include <sstream>
#include <tuple>

namespace linac::emit {
namespace {

/// Operands one fused role may read (kernels/common/fused.h: kMaxRoleOperands).
constexpr size_t kMaxRoleOperands = 4;

void countRefs(const spec::ExprPtr& e, std::map<std::string, int>& counts) {
  if (!e) return;
  spec::forEachNode(*e, [&](const spec::Expr& node) {
    if (node.kind == spec::ExprKind::Ref) ++counts[node.name];
  });
}

/// How often each name is read by the spec's expressions (definitions included) and the bonus.
std::map<std::string, int> referenceCounts(const spec::VariantSpec& spec) {
  std::map<std::string, int> counts;
  for (const auto& d : spec.defs) countRefs(d.expr, counts);
  const auto& r = spec.recurrence;
  for (const auto& e : {r.q, r.k, r.v, r.decay, r.beta, spec.output.gate, spec.output.residual})
    countRefs(e, counts);
  if (!r.bonus.empty()) ++counts[r.bonus];
  return counts;
}

const spec::InputSpec* inputNamed(const spec::VariantSpec& spec, const std::string& name) {
  for (const auto& in : spec.inputs)
    if (in.name == name) return &in;
  return nullptr;
}

/// One line of the generated comment describing `role`.
std::string describe(const std::string& role, const FusedRole& r, const std::string& granularity) {
  std::string line = "///   " + role + std::string(role.size() < 6 ? 6 - role.size() : 0, ' ') + " ";
  if (!r.tile.empty())
    return line + "tile of input " + r.tile + (r.normalize ? ", L2-normalised in the kernel" : "");
  std::string args;
  for (size_t j = 0; j < r.args.size(); ++j) args += (j ? ", " : "") + r.args[j];
  line += role + "(" + args + ")";
  return granularity.empty() ? line : line + " " + granularity;
}

/// The policy's static member computing `role` from its operands.
std::string roleFunction(const std::string& variant, const std::string& role, const FusedRole& r) {
  std::string call = variant + "::" + role + "(";
  for (size_t j = 0; j < r.args.size(); ++j) call += (j ? ", " : "") + ("at(" + std::to_string(j) + ")");
  call += ")";
  return "  __device__ static float " + role + "(const RoleAt& at) {\n    return " + call + ";\n  }\n";
}

}  // namespace

FusedRolesPlan planFusedRoles(const spec::VariantSpec& spec,
                              const std::map<std::string, std::vector<std::string>>& roleArgs,
                              bool vectorState, bool decayNone) {
  FusedRolesPlan plan;
  auto refuse = [&](std::string why) {
    plan.why = std::move(why);
    return plan;
  };
  if (vectorState) return refuse("vector state (the scan reads its operands materialised)");
  const std::map<std::string, int> refs = referenceCounts(spec);
  const auto& rec = spec.recurrence;

  // A tile: a plain reference to an input of the role's extent (q, k, v). Computed: the role's
  // generated function of its operands.
  auto assign = [&](const std::string& role, const spec::ExprPtr& e, spec::Extent extent,
                    bool tileable, FusedRole& out) -> std::string {
    if (tileable && e && e->kind == spec::ExprKind::Ref) {
      if (const spec::InputSpec* in = inputNamed(spec, e->name); in && in->extent == extent) {
        out.tile = in->name;
        // Normalised in the kernel only when nothing else reads the input (it then arrives raw).
        out.normalize = in->l2norm && !in->rope && refs.at(in->name) == 1;
        return "";
      }
    }
    auto it = roleArgs.find(role);
    if (it == roleArgs.end()) return role + " is a plain reference the kernel cannot read as a tile";
    out.args = it->second;
    if (out.args.size() > kMaxRoleOperands)
      return role + " reads " + std::to_string(out.args.size()) + " operands (the fused kernel takes " +
             std::to_string(kMaxRoleOperands) + ")";
    return "";
  };
  for (auto [role, expr, extent, out] :
       {std::tuple{"q", rec.q, spec::Extent::Key, &plan.q}, std::tuple{"k", rec.k, spec::Extent::Key, &plan.k}}) {
    if (std::string why = assign(role, expr, extent, true, *out); !why.empty()) return refuse(why);
  }
  if (std::string why = assign("v", rec.v, spec::Extent::Value, true, plan.v); !why.empty() || plan.v.tile.empty())
    return refuse("v is not a plain reference to a value input");
  plan.hasDecay = !decayNone && rec.decay;
  if (plan.hasDecay)
    if (std::string why = assign("decay", rec.decay, spec::Extent::Key, false, plan.decay); !why.empty())
      return refuse(why);
  plan.hasBeta = rec.update == spec::UpdateKind::Delta;
  if (plan.hasBeta)
    if (std::string why = assign("beta", rec.beta, spec::Extent::Head, false, plan.beta); !why.empty())
      return refuse(why);
  plan.bonus = rec.bonus;
  plan.available = true;
  return plan;
}

std::string fusedPlanInitializer(const FusedRolesPlan& plan, const std::string& name,
                                 const std::string& indent) {
  if (!plan.available) return indent + "// Not fused: " + plan.why + ".\n" + indent + "{}";
  auto quoted = [](const std::string& s) { return "\"" + s + "\""; };
  std::ostringstream os;
  os << indent << "// Fused forward: the chunk kernel computes the prologue (Roles in " << name
     << "_cuda.cu).\n";
  os << indent << "{.available = true,\n"
     << indent << " .qTile = " << quoted(plan.q.tile) << ",\n"
     << indent << " .kTile = " << quoted(plan.k.tile) << ",\n"
     << indent << " .vTile = " << quoted(plan.v.tile) << ",\n"
     << indent << " .normQ = " << (plan.q.normalize ? "true" : "false") << ",\n"
     << indent << " .normK = " << (plan.k.normalize ? "true" : "false");
  if (!plan.bonus.empty()) os << ",\n" << indent << " .bonus = " << quoted(plan.bonus);
  os << "}";
  return os.str();
}

std::string fusedForwardSource(const spec::VariantSpec& spec, const FusedRolesPlan& plan) {
  if (!plan.available) return "";
  const std::string& name = spec.name;
  std::ostringstream os;
  os << "/// Where the chunk forward gets " << name << "'s roles (kernels/cuda/chunk_roles.cuh):\n"
     << describe("q", plan.q, "per element") << "\n"
     << describe("k", plan.k, "per element") << "\n"
     << describe("v", plan.v, "") << "\n";
  if (plan.hasDecay) os << describe("decay", plan.decay, "per element of the decay class") << "\n";
  if (plan.hasBeta) os << describe("beta", plan.beta, "per token") << "\n";
  auto flag = [](bool b) { return b ? "true" : "false"; };
  os << "struct Roles {\n"
     << "  static constexpr kernels::RecurrenceKind kKind = " << name << "::kKind;\n"
     << "  static constexpr bool kComputeQ = " << flag(plan.q.tile.empty())
     << ", kComputeK = " << flag(plan.k.tile.empty()) << ";\n"
     << "  static constexpr bool kNormQ = " << flag(plan.q.normalize)
     << ", kNormK = " << flag(plan.k.normalize) << ";\n"
     << "  static constexpr bool kComputeDecay = " << flag(plan.hasDecay)
     << ", kComputeBeta = " << flag(plan.hasBeta) << ";\n";
  if (plan.q.tile.empty()) os << "\n" << roleFunction(name, "q", plan.q);
  if (plan.k.tile.empty()) os << "\n" << roleFunction(name, "k", plan.k);
  if (plan.hasDecay) os << "\n" << roleFunction(name, "decay", plan.decay);
  if (plan.hasBeta) os << "\n" << roleFunction(name, "beta", plan.beta);
  os << "};\n\n"
     << "void fusedForward(const kernels::FusedForwardArgs& args, cudaStream_t stream) {\n"
     << "  kernels::cuda::launchFusedChunkForward<Roles>(args, stream);\n}\n\n";
  return os.str();
}

}  // namespace linac::emit
