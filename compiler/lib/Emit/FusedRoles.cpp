#include "linac/Emit/FusedRoles.h"

#include <sstream>
#include <stdexcept>

namespace linac::emit {
namespace {

namespace ml = mlir::linac;

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

FusedRolesPlan readFusedRoles(ml::RecurrenceOp rec,
                              const std::map<std::string, std::vector<std::string>>& roleArgs) {
  mlir::DictionaryAttr fused = rec.getFusedAttr();
  if (!fused) throw std::runtime_error("emit: fusion not planned (run linac-plan-fused-prologue)");
  auto text = [&](const char* key) {
    auto a = fused.getAs<mlir::StringAttr>(key);
    if (!a) throw std::runtime_error(std::string("emit: the fused plan has no '") + key + "'");
    return a.str();
  };
  auto flag = [&](const char* key) {
    auto a = fused.getAs<mlir::BoolAttr>(key);
    if (!a) throw std::runtime_error(std::string("emit: the fused plan has no '") + key + "'");
    return a.getValue();
  };
  FusedRolesPlan plan;
  if (!flag("available")) {
    plan.why = text("reason");
    return plan;
  }
  // A computed role's operands are those of its generated function.
  auto role = [&](const std::string& name, const std::string& tile, FusedRole& out) {
    out.tile = tile;
    if (!tile.empty()) return;
    auto it = roleArgs.find(name);
    if (it == roleArgs.end()) throw std::runtime_error("emit: the fused plan computes '" + name + "', which has no map");
    out.args = it->second;
  };
  role("q", text("q"), plan.q);
  role("k", text("k"), plan.k);
  role("v", text("v"), plan.v);
  plan.q.normalize = flag("norm_q");
  plan.k.normalize = flag("norm_k");
  plan.hasDecay = flag("decay");
  if (plan.hasDecay) role("decay", "", plan.decay);
  plan.hasBeta = flag("beta");
  if (plan.hasBeta) role("beta", "", plan.beta);
  if (mlir::Value bonus = rec.getBonus())
    if (auto param = bonus.getDefiningOp<ml::ParamOp>()) plan.bonus = param.getName().str();
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

std::string fusedForwardSource(const std::string& name, const FusedRolesPlan& plan) {
  if (!plan.available) return "";
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
