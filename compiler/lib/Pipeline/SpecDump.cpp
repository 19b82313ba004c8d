// `--emit=spec`: the parsed and validated spec, printed back in a normalised form (every default
// filled in, expressions fully parenthesised) so a user can see exactly what linac understood.
#include "SpecDump.h"

#include <sstream>

namespace linac::pipeline {
namespace {

const char* activationName(spec::Activation a) {
  switch (a) {
  case spec::Activation::None: return "none";
  case spec::Activation::Silu: return "silu";
  case spec::Activation::Sigmoid: return "sigmoid";
  case spec::Activation::Relu: return "relu";
  case spec::Activation::Tanh: return "tanh";
  case spec::Activation::Elu1: return "elu1";
  }
  return "?";
}

const char* initName(spec::InitKind k) {
  switch (k) {
  case spec::InitKind::Zeros: return "zeros";
  case spec::InitKind::Ones: return "ones";
  case spec::InitKind::Constant: return "constant";
  case spec::InitKind::Normal: return "normal";
  case spec::InitKind::Uniform: return "uniform";
  case spec::InitKind::LogUniform: return "log_uniform";
  case spec::InitKind::DtBias: return "dt_bias";
  }
  return "?";
}

const char* normName(spec::NormKind n) {
  switch (n) {
  case spec::NormKind::None: return "none";
  case spec::NormKind::RMSNorm: return "rmsnorm";
  case spec::NormKind::GroupNorm: return "groupnorm";
  case spec::NormKind::LayerNorm: return "layernorm";
  }
  return "?";
}

std::string dim(const spec::DimSpec& d) {
  std::ostringstream os;
  if (d.absolute > 0) os << d.absolute;
  else os << "{expand: " << d.expand << "}";
  return os.str();
}

std::string expr(const spec::ExprPtr& e) { return e ? "\"" + spec::toString(*e) + "\"" : "none"; }

}  // namespace

std::string dumpSpec(const spec::VariantSpec& v) {
  std::ostringstream os;
  os << "# " << v.file << " (sha256 " << v.hash << ")\n";
  os << "name: " << v.name << "\n";
  os << "kind: " << (v.kind == spec::VariantKind::Linear ? "linear" : "attention") << "\n";
  os << "heads: " << v.heads << "\n";
  os << "key_dim: " << dim(v.keyDim) << "\n";
  if (v.kind == spec::VariantKind::Attention) {
    os << "attention: {kv_heads: " << v.attention.kvHeads << ", rope: "
       << (v.attention.rope ? "true" : "false") << ", rope_theta: " << v.attention.ropeTheta << "}\n";
    return os.str();
  }
  os << "value_dim: " << dim(v.valueDim) << "\n";
  os << "inputs:\n";
  for (const auto& in : v.inputs) {
    os << "  " << in.name << ": {extent: " << extentName(in.extent);
    if (in.lowRank) os << ", low_rank: " << in.lowRank;
    if (in.conv) os << ", conv: " << in.conv;
    if (in.activation != spec::Activation::None) os << ", activation: " << activationName(in.activation);
    if (in.l2norm) os << ", l2norm: true";
    if (in.tokenShift) os << ", token_shift: true";
    if (in.rope) os << ", rope: true";
    if (in.bias) os << ", bias: true";
    os << "}\n";
  }
  if (!v.params.empty()) os << "params:\n";
  for (const auto& p : v.params)
    os << "  " << p.name << ": {extent: " << extentName(p.extent) << ", init: " << initName(p.init.kind)
       << "(" << p.init.a << ", " << p.init.b << ")}\n";
  if (!v.defs.empty()) os << "define:\n";
  for (const auto& d : v.defs) os << "  " << d.name << ": " << expr(d.expr) << "\n";
  const auto& r = v.recurrence;
  os << "recurrence:\n";
  os << "  state: " << (r.state == spec::StateKind::Matrix ? "matrix" : "vector") << "\n";
  if (r.q) os << "  q: " << expr(r.q) << "\n";
  if (r.k) os << "  k: " << expr(r.k) << "\n";
  os << "  v: " << expr(r.v) << "\n";
  os << "  decay: " << expr(r.decay) << "\n";
  os << "  update: " << (r.update == spec::UpdateKind::Additive ? "additive" : "delta") << "\n";
  if (r.beta) os << "  beta: " << expr(r.beta) << "\n";
  os << "  readout: " << (r.readout == spec::ReadoutKind::Inclusive ? "inclusive" : "exclusive_bonus") << "\n";
  if (!r.bonus.empty()) os << "  bonus: " << r.bonus << "\n";
  if (r.scale) os << "  scale: " << *r.scale << "\n";
  else os << "  scale: key_dim^-0.5\n";
  os << "output:\n  norm: " << normName(v.output.norm) << "\n  gate: " << expr(v.output.gate)
     << "\n  residual: " << expr(v.output.residual) << "\n";
  os << "chunk: " << v.chunk << "\n";
  return os.str();
}

}  // namespace linac::pipeline
