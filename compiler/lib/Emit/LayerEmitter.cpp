#include "linac/Emit/LayerEmitter.h"

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

/// A role operand: absent, read as it is (an input, param or index), or computed by its map.
std::string role(mlir::Value v) {
  if (!v) return "{}";
  mlir::Operation* def = v.getDefiningOp();
  std::string name;
  if (auto in = llvm::dyn_cast_or_null<ml::InputOp>(def)) name = in.getName().str();
  else if (auto p = llvm::dyn_cast_or_null<ml::ParamOp>(def)) name = p.getName().str();
  else if (auto i = llvm::dyn_cast_or_null<ml::IndexOp>(def)) name = i.getName().str();
  else if (!llvm::isa_and_nonnull<ml::MapOp>(def))
    throw std::runtime_error("emit: a role is neither a leaf nor a map");
  return name.empty() ? "{.present = true}" : "{.present = true, .name = " + quoted(name) + "}";
}

}  // namespace

std::string layerDescriptionSource(ml::VariantOp variant) {
  mlir::Block& body = variant.getBodyBlock();
  auto recs = body.getOps<ml::RecurrenceOp>();
  auto outs = body.getOps<ml::OutputOp>();
  if (recs.empty() || outs.empty()) throw std::runtime_error("emit: a variant without recurrence or output");
  ml::RecurrenceOp rec = *recs.begin();
  ml::OutputOp out = *outs.begin();
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
    llvm::ArrayRef<double> args = p.getInitArgs();
    if (args.size() > 2) throw std::runtime_error("emit: param '" + p.getName().str() + "' has more than 2 init args");
    if (!args.empty()) f.push_back(".a = " + number(args[0]));
    if (args.size() > 1) f.push_back(".b = " + number(args[1]));
    os << braced(in2 + "    ", f, ",");
  }
  os << in2 << "},\n"
     << in1 << ".q = " << role(rec.getQ()) << ",\n"
     << in1 << ".k = " << role(rec.getK()) << ",\n"
     << in1 << ".v = " << role(rec.getV()) << ",\n"
     << in1 << ".decay = " << role(rec.getDecay()) << ",\n"
     << in1 << ".beta = " << role(rec.getBeta()) << ",\n";
  if (mlir::Value bonus = rec.getBonus()) {
    auto param = bonus.getDefiningOp<ml::ParamOp>();
    if (!param) throw std::runtime_error("emit: the bonus is not a param");
    os << in1 << ".bonus = " << quoted(param.getName().str()) << ",\n";
  }
  if (auto scale = rec.getScaleAttr()) os << in1 << ".scale = " << number(scale.getValueAsDouble()) << ",\n";
  os << in1 << ".norm = " << norm(out.getNorm()) << ",\n"
     << in1 << ".gate = " << role(out.getGate()) << ",\n"
     << in1 << ".residual = " << role(out.getResidual()) << "};\n";
  return os.str();
}

}  // namespace linac::emit
