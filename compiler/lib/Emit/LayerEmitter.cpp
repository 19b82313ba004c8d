#include "linac/Emit/LayerEmitter.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace linac::emit {
namespace {

namespace ml = mlir::linac;

/// Column limit of the generated sources.
constexpr size_t kLineWidth = 100;

/// `{a, b, c}` on one line after `indent` when it fits (with `tail`), else one item per line.
std::string braced(const std::string& indent, const std::vector<std::string>& items, const std::string& tail) {
  std::string flat = "{";
  for (size_t i = 0; i < items.size(); ++i) flat += (i ? ", " : "") + items[i];
  flat += "}";
  if (indent.size() + flat.size() + tail.size() <= kLineWidth) return indent + flat + tail + "\n";
  std::string out = indent + "{";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ",\n" + indent + " " : "") + items[i];
  return out + "}" + tail + "\n";
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

/// A double as a C++ literal that reads back to the same value, in the fewest digits that do.
std::string number(double x) {
  char buf[40];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string extent(ml::Extent e) {
  switch (e) {
  case ml::Extent::scalar: return "runtime::Extent::Scalar";
  case ml::Extent::head: return "runtime::Extent::Head";
  case ml::Extent::key: return "runtime::Extent::Key";
  case ml::Extent::value: return "runtime::Extent::Value";
  case ml::Extent::hidden: return "runtime::Extent::Hidden";
  }
  throw std::runtime_error("emit: unknown extent");
}

std::string activation(ml::Activation a) {
  switch (a) {
  case ml::Activation::none: return "runtime::Activation::None";
  case ml::Activation::silu: return "runtime::Activation::Silu";
  case ml::Activation::sigmoid: return "runtime::Activation::Sigmoid";
  case ml::Activation::relu: return "runtime::Activation::Relu";
  case ml::Activation::tanh: return "runtime::Activation::Tanh";
  case ml::Activation::elu1: return "runtime::Activation::Elu1";
  }
  throw std::runtime_error("emit: unknown activation");
}

std::string init(ml::InitKind k) {
  switch (k) {
  case ml::InitKind::zeros: return "runtime::InitKind::Zeros";
  case ml::InitKind::ones: return "runtime::InitKind::Ones";
  case ml::InitKind::constant: return "runtime::InitKind::Constant";
  case ml::InitKind::normal: return "runtime::InitKind::Normal";
  case ml::InitKind::uniform: return "runtime::InitKind::Uniform";
  case ml::InitKind::log_uniform: return "runtime::InitKind::LogUniform";
  case ml::InitKind::dt_bias: return "runtime::InitKind::DtBias";
  }
  throw std::runtime_error("emit: unknown init");
}

std::string norm(ml::NormKind n) {
  switch (n) {
  case ml::NormKind::none: return "runtime::NormKind::None";
  case ml::NormKind::rmsnorm: return "runtime::NormKind::RMSNorm";
  case ml::NormKind::groupnorm: return "runtime::NormKind::GroupNorm";
  case ml::NormKind::layernorm: return "runtime::NormKind::LayerNorm";
  }
  throw std::runtime_error("emit: unknown norm");
}

std::string dimRule(int64_t absolute, mlir::FloatAttr expand) {
  if (expand) return "{.expand = " + number(expand.getValueAsDouble()) + "}";
  return "{.absolute = " + std::to_string(absolute) + "}";
}

/// Where a recurrence or output role comes from (runtime::RoleSource).
struct RoleFacts {
  bool present = false;
  std::string name;  // the input, param or index read as it is; empty: the role's map
};

/// A role operand: absent, read as it is (an input, param or index), or computed by its map.
RoleFacts role(mlir::Value v) {
  if (!v) return {};
  mlir::Operation* def = v.getDefiningOp();
  if (llvm::isa_and_nonnull<ml::MapOp>(def)) return {true, ""};
  if (!llvm::isa_and_nonnull<ml::InputOp, ml::ParamOp, ml::IndexOp>(def))
    throw std::runtime_error("emit: a role is neither a leaf nor a map");
  return {true, mapOperandName(v, 0)};
}

std::string cppRole(const RoleFacts& r) {
  if (!r.present) return "{}";
  return r.name.empty() ? "{.present = true}" : "{.present = true, .name = " + quoted(r.name) + "}";
}

/// The variant's recurrence and output ops (one of each after the pipeline).
std::pair<ml::RecurrenceOp, ml::OutputOp> rolesOf(ml::VariantOp variant) {
  mlir::Block& body = variant.getBodyBlock();
  auto recs = body.getOps<ml::RecurrenceOp>();
  auto outs = body.getOps<ml::OutputOp>();
  if (recs.empty() || outs.empty()) throw std::runtime_error("emit: a variant without recurrence or output");
  return {*recs.begin(), *outs.begin()};
}

/// The bonus parameter's name, or "" without one.
std::string bonusName(ml::RecurrenceOp rec) {
  mlir::Value bonus = rec.getBonus();
  if (!bonus) return "";
  auto param = bonus.getDefiningOp<ml::ParamOp>();
  if (!param) throw std::runtime_error("emit: the bonus is not a param");
  return param.getName().str();
}

llvm::ArrayRef<double> initArgs(ml::ParamOp p) {
  llvm::ArrayRef<double> args = p.getInitArgs();
  if (args.size() > 2) throw std::runtime_error("emit: param '" + p.getName().str() + "' has more than 2 init args");
  return args;
}

}  // namespace

std::string mapOperandName(mlir::Value v, size_t index) {
  mlir::Operation* def = v.getDefiningOp();
  if (auto in = llvm::dyn_cast_or_null<ml::InputOp>(def)) return in.getName().str();
  if (auto p = llvm::dyn_cast_or_null<ml::ParamOp>(def)) return p.getName().str();
  if (auto i = llvm::dyn_cast_or_null<ml::IndexOp>(def)) return i.getName().str();
  return "x" + std::to_string(index);
}

std::string layerDescriptionSource(ml::VariantOp variant) {
  mlir::Block& body = variant.getBodyBlock();
  auto [rec, out] = rolesOf(variant);
  const std::string in1 = "    ", in2 = "        ";
  std::ostringstream os;
  os << "const runtime::LayerDescription kLayer{\n"
     << in1 << ".heads = kHeads,\n"
     << in1 << ".keyDim = " << dimRule(variant.getKeyDim(), variant.getKeyExpandAttr()) << ",\n"
     << in1 << ".valueDim = " << dimRule(variant.getValueDim(), variant.getValueExpandAttr()) << ",\n"
     << in1 << ".inputs =\n" << in2 << "{\n";
  for (auto in : body.getOps<ml::InputOp>()) {
    std::vector<std::string> f = {".name = " + quoted(in.getName().str()),
                                  ".extent = " + extent(llvm::cast<ml::FieldType>(in.getType()).getExtent())};
    if (in.getLowRank()) f.push_back(".lowRank = " + std::to_string(in.getLowRank()));
    if (in.getConv()) f.push_back(".conv = " + std::to_string(in.getConv()));
    if (in.getActivation() != ml::Activation::none) f.push_back(".activation = " + activation(in.getActivation()));
    if (in.getL2norm()) f.push_back(".l2norm = true");
    if (in.getTokenShift()) f.push_back(".tokenShift = true");
    if (in.getBias()) f.push_back(".bias = true");
    if (in.getRope()) f.push_back(".rope = true");
    os << braced(in2 + "    ", f, ",");
  }
  os << in2 << "},\n" << in1 << ".params =\n" << in2 << "{\n";
  for (auto p : body.getOps<ml::ParamOp>()) {
    std::vector<std::string> f = {".name = " + quoted(p.getName().str()),
                                  ".extent = " + extent(llvm::cast<ml::FieldType>(p.getType()).getExtent())};
    if (p.getInit() != ml::InitKind::zeros) f.push_back(".init = " + init(p.getInit()));
    llvm::ArrayRef<double> args = initArgs(p);
    if (!args.empty()) f.push_back(".a = " + number(args[0]));
    if (args.size() > 1) f.push_back(".b = " + number(args[1]));
    os << braced(in2 + "    ", f, ",");
  }
  os << in2 << "},\n"
     << in1 << ".q = " << cppRole(role(rec.getQ())) << ",\n"
     << in1 << ".k = " << cppRole(role(rec.getK())) << ",\n"
     << in1 << ".v = " << cppRole(role(rec.getV())) << ",\n"
     << in1 << ".decay = " << cppRole(role(rec.getDecay())) << ",\n"
     << in1 << ".beta = " << cppRole(role(rec.getBeta())) << ",\n";
  if (const std::string bonus = bonusName(rec); !bonus.empty()) os << in1 << ".bonus = " << quoted(bonus) << ",\n";
  if (auto scale = rec.getScaleAttr()) os << in1 << ".scale = " << number(scale.getValueAsDouble()) << ",\n";
  os << in1 << ".norm = " << norm(out.getNorm()) << ",\n"
     << in1 << ".gate = " << cppRole(role(out.getGate())) << ",\n"
     << in1 << ".residual = " << cppRole(role(out.getResidual())) << "};\n";
  return os.str();
}

namespace {

std::string pyString(llvm::StringRef s) { return "\"" + s.str() + "\""; }
/// A role as linac.nn reads it: None (absent), "map" (computed by the role's function), or the
/// name of the input, param or index read as it is.
std::string pyRole(const RoleFacts& r) {
  if (!r.present) return "None";
  return r.name.empty() ? pyString("map") : pyString(r.name);
}
std::string pyDim(int64_t absolute, mlir::FloatAttr expand) {
  if (expand) return "{\"expand\": " + number(expand.getValueAsDouble()) + "}";
  return "{\"absolute\": " + std::to_string(absolute) + "}";
}

}  // namespace

std::string layerDescriptionPython(ml::VariantOp variant) {
  mlir::Block& body = variant.getBodyBlock();
  auto [rec, out] = rolesOf(variant);
  const std::string in1 = "    ", in2 = "        ";
  std::ostringstream os;
  os << "LAYER = {\n"
     << in1 << "\"heads\": " << variant.getHeads() << ",\n"
     << in1 << "\"key_dim\": " << pyDim(variant.getKeyDim(), variant.getKeyExpandAttr()) << ",\n"
     << in1 << "\"value_dim\": " << pyDim(variant.getValueDim(), variant.getValueExpandAttr()) << ",\n"
     << in1 << "\"inputs\": [\n";
  for (auto in : body.getOps<ml::InputOp>()) {
    // As the C++ description: the fields that differ from their defaults (no low rank, no conv,
    // activation "none", no L2 norm, token shift, bias or RoPE).
    std::vector<std::string> f = {
        "\"name\": " + pyString(in.getName()),
        "\"extent\": " + pyString(ml::stringifyExtent(llvm::cast<ml::FieldType>(in.getType()).getExtent()))};
    if (in.getLowRank()) f.push_back("\"low_rank\": " + std::to_string(in.getLowRank()));
    if (in.getConv()) f.push_back("\"conv\": " + std::to_string(in.getConv()));
    if (in.getActivation() != ml::Activation::none)
      f.push_back("\"activation\": " + pyString(ml::stringifyActivation(in.getActivation())));
    if (in.getL2norm()) f.push_back("\"l2norm\": True");
    if (in.getTokenShift()) f.push_back("\"token_shift\": True");
    if (in.getBias()) f.push_back("\"bias\": True");
    if (in.getRope()) f.push_back("\"rope\": True");
    os << braced(in2, f, ",");
  }
  os << in1 << "],\n" << in1 << "\"params\": [\n";
  for (auto p : body.getOps<ml::ParamOp>()) {
    std::vector<std::string> args;
    for (double a : initArgs(p)) args.push_back(number(a));
    std::string argList = "[";
    for (size_t i = 0; i < args.size(); ++i) argList += (i ? ", " : "") + args[i];
    argList += "]";
    std::vector<std::string> f = {
        "\"name\": " + pyString(p.getName()),
        "\"extent\": " + pyString(ml::stringifyExtent(llvm::cast<ml::FieldType>(p.getType()).getExtent())),
        "\"init\": " + pyString(ml::stringifyInitKind(p.getInit())), "\"init_args\": " + argList};
    os << braced(in2, f, ",");
  }
  const std::string bonus = bonusName(rec);
  os << in1 << "],\n"
     << in1 << "\"roles\": {\"q\": " << pyRole(role(rec.getQ())) << ", \"k\": " << pyRole(role(rec.getK()))
     << ", \"v\": " << pyRole(role(rec.getV())) << ", \"decay\": " << pyRole(role(rec.getDecay()))
     << ",\n" << in1 << "          \"beta\": " << pyRole(role(rec.getBeta()))
     << ", \"gate\": " << pyRole(role(out.getGate())) << ", \"residual\": " << pyRole(role(out.getResidual()))
     << "},\n"
     << in1 << "\"bonus\": " << (bonus.empty() ? "None" : pyString(bonus)) << ",\n"
     << in1 << "\"scale\": " << (rec.getScaleAttr() ? number(rec.getScaleAttr().getValueAsDouble()) : "None")
     << ",\n"
     << in1 << "\"norm\": " << pyString(ml::stringifyNormKind(out.getNorm())) << ",\n"
     << "}\n";
  return os.str();
}

}  // namespace linac::emit
