#include "interop/fla_variants.h"

#include "registry/registry.h"

#include "linac/Spec/SpecParser.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace linac::interop::detail {
namespace {

using spec::Activation;
using spec::Extent;
using Json = nlohmann::json;

/// Relative tolerance for ratios written as floats (expand_k 0.5, expand_v 2).
constexpr double kRatioTolerance = 1e-6;

std::string field(const std::string& key) { return "config.json field '" + key + "'"; }

/// round(hidden * ratio) split over `heads`; throws naming `key` when it is not an integer
/// divisible by heads (fla asserts the same).
int64_t perHead(const ConfigView& c, const std::string& key, double fallback, int64_t hidden, int64_t heads) {
  const double total = hidden * c.number(key, fallback);
  const auto rounded = static_cast<int64_t>(std::llround(total));
  if (std::abs(total - double(rounded)) > kRatioTolerance * std::max(1.0, total) || rounded <= 0 || rounded % heads)
    throw Unsupported(field(key) + ": hidden_size * " + key + " = " + std::to_string(total) +
                      " is not a positive integer divisible by num_heads " + std::to_string(heads));
  return rounded / heads;
}

int64_t positive(const ConfigView& c, const std::string& key, int64_t fallback) {
  const int64_t v = c.integer(key, fallback);
  if (v <= 0) throw Unsupported(field(key) + " must be positive, got " + std::to_string(v));
  return v;
}

/// q, k, v as fla's layers build them: projection, then the short conv (with its activation) or,
/// without one, the activation alone.
ExpectedInput projected(const std::string& name, Extent extent, int64_t conv, Activation act, bool l2norm) {
  ExpectedInput in;
  in.name = name, in.extent = extent, in.conv = conv, in.activation = act, in.l2norm = l2norm;
  in.flaProj = name + "_proj";
  if (conv > 0) in.flaConv = name + "_conv1d";
  return in;
}

ExpectedInput plain(const std::string& name, Extent extent, const std::string& flaProj) {
  ExpectedInput in;
  in.name = name, in.extent = extent, in.flaProj = flaProj;
  return in;
}

int64_t shortConv(const ConfigView& c, bool fallback) {
  return c.boolean("use_short_conv", fallback) ? positive(c, "conv_size", 4) : 0;
}

/// The output gate's activation as a spec expression of input `g`.
std::string gateExpression(const ConfigView& c, const std::string& key, const std::string& fallback) {
  const std::string act = c.string(key, fallback);
  if (act == "swish" || act == "silu") return "silu(g)";
  if (act == "sigmoid") return "sigmoid(g)";
  throw Unsupported(field(key) + " is '" + act + "'; linac maps swish, silu and sigmoid output gates");
}

// ----- GLA (fla/layers/gla.py) ---------------------------------------------------------------

/// fla's GatedLinearAttention defaults that config.json cannot change.
constexpr int64_t kGlaGateLowRank = 16;
constexpr const char* kGlaDecay = "logsigmoid(gk) / 16";  // gate_logit_normalizer 16

ExpectedSpec glaExpected(const ConfigView& c, int64_t hidden) {
  c.require("feature_map", nullptr, "linac's GLA applies no feature map to q and k");
  c.require("clamp_min", nullptr, "linac's GLA does not clamp the gate logits");
  c.require("use_output_gate", true, "linac's GLA spec has the output gate");
  c.require("elementwise_affine", true, "linac's output norm has a weight");
  ExpectedSpec e;
  e.heads = positive(c, "num_heads", 4);
  c.require("num_kv_heads", e.heads, "linac's GLA has no grouped keys and values");
  e.keyDim = perHead(c, "expand_k", 0.5, hidden, e.heads);
  e.valueDim = perHead(c, "expand_v", 1.0, hidden, e.heads);
  const int64_t conv = shortConv(c, false);
  const Activation act = conv ? Activation::Silu : Activation::None;
  e.inputs = {projected("q", Extent::Key, conv, act, false), projected("k", Extent::Key, conv, act, false),
              projected("v", Extent::Value, conv, act, false)};
  ExpectedInput gk = plain("gk", Extent::Key, "gk_proj");
  gk.lowRank = kGlaGateLowRank, gk.bias = true;
  e.inputs.push_back(gk);
  e.inputs.push_back(plain("g", Extent::Value, "g_proj"));
  e.q = "q", e.k = "k", e.v = "v", e.decay = kGlaDecay;
  e.gate = gateExpression(c, "hidden_act", "swish");
  // fla fuses norm and gate (one weight, g_norm_swish_gate) for a swish gate with fuse_norm.
  e.flaNorm = c.boolean("fuse_norm", true) && e.gate == "silu(g)" ? "g_norm_swish_gate" : "g_norm";
  return e;
}

void glaWrite(const spec::VariantSpec& s, const model::MixerDims& d, nlohmann::ordered_json& j) {
  const int64_t conv = s.inputs.empty() ? 0 : s.inputs.front().conv;
  j["num_heads"] = d.heads;
  j["expand_k"] = double(d.heads * d.keyDim) / double(d.hidden);
  j["expand_v"] = double(d.heads * d.valueDim) / double(d.hidden);
  j["num_kv_heads"] = nullptr;
  j["feature_map"] = nullptr;
  j["use_short_conv"] = conv > 0;
  j["conv_size"] = conv > 0 ? conv : 4;
  j["use_output_gate"] = true;
  j["clamp_min"] = nullptr;
  j["elementwise_affine"] = true;
  j["attn_mode"] = "chunk";
}

// ----- Gated DeltaNet (fla/layers/gated_deltanet.py) -----------------------------------------

ExpectedSpec gdnExpected(const ConfigView& c, int64_t hidden) {
  (void)hidden;
  c.require("allow_neg_eigval", false, "linac's Gated DeltaNet writes with beta = sigmoid(b), not 2 sigmoid(b)");
  c.require("use_gate", true, "linac's Gated DeltaNet spec has the output gate");
  ExpectedSpec e;
  e.heads = positive(c, "num_heads", 6);
  c.require("num_v_heads", e.heads, "linac's Gated DeltaNet has no grouped value heads");
  e.keyDim = positive(c, "head_dim", 256);
  const double expandV = c.number("expand_v", 2.0);
  e.valueDim = static_cast<int64_t>(std::llround(double(e.keyDim) * expandV));
  if (std::abs(double(e.keyDim) * expandV - double(e.valueDim)) > kRatioTolerance * double(e.keyDim))
    throw Unsupported(field("expand_v") + ": head_dim * expand_v is not an integer");
  const int64_t conv = shortConv(c, true);
  e.inputs = {projected("q", Extent::Key, conv, Activation::Silu, true),
              projected("k", Extent::Key, conv, Activation::Silu, true),
              projected("v", Extent::Value, conv, Activation::Silu, false), plain("a", Extent::Head, "a_proj"),
              plain("b", Extent::Head, "b_proj"), plain("g", Extent::Value, "g_proj")};
  e.params = {{"A_log", Extent::Head, "A_log"}, {"dt_bias", Extent::Head, "dt_bias"}};
  e.q = "q", e.k = "k", e.v = "v";
  e.decay = "-exp(A_log) * softplus(a + dt_bias)";
  e.update = spec::UpdateKind::Delta;
  e.beta = "sigmoid(b)";
  e.gate = gateExpression(c, "output_gate_activation", "swish");
  e.flaNorm = "o_norm";
  return e;
}

void gdnWrite(const spec::VariantSpec& s, const model::MixerDims& d, nlohmann::ordered_json& j) {
  const int64_t conv = s.inputs.empty() ? 0 : s.inputs.front().conv;
  j["num_heads"] = d.heads;
  j["head_dim"] = d.keyDim;
  j["expand_v"] = double(d.valueDim) / double(d.keyDim);
  j["num_v_heads"] = nullptr;
  j["use_gate"] = true;
  j["use_short_conv"] = conv > 0;
  j["conv_size"] = conv > 0 ? conv : 4;
  j["allow_neg_eigval"] = false;
  j["output_gate_activation"] = "swish";
  j["attn_mode"] = "chunk";
}

// ----- DeltaNet (fla/layers/delta_net.py) ----------------------------------------------------

Activation qkActivation(const ConfigView& c) {
  const std::string a = c.string("qk_activation", "silu");
  if (a == "silu") return Activation::Silu;
  if (a == "relu") return Activation::Relu;
  if (a == "elu") return Activation::Elu1;  // fla's elu_p1
  if (a == "identity") return Activation::None;
  throw Unsupported(field("qk_activation") + " is '" + a + "' (fla allows silu, relu, elu, identity)");
}

ExpectedSpec deltaNetExpected(const ConfigView& c, int64_t hidden) {
  c.require("qk_norm", "l2", "linac's DeltaNet L2-normalises q and k");
  c.require("use_beta", true, "linac's DeltaNet writes with beta = sigmoid(b)");
  c.require("allow_neg_eigval", false, "linac's DeltaNet writes with beta = sigmoid(b), not 2 sigmoid(b)");
  c.require("use_output_norm", true, "linac's DeltaNet normalises its output");
  ExpectedSpec e;
  e.heads = positive(c, "num_heads", 16);
  e.keyDim = perHead(c, "expand_k", 1.0, hidden, e.heads);
  e.valueDim = perHead(c, "expand_v", 1.0, hidden, e.heads);
  const int64_t conv = shortConv(c, true);
  const Activation qk = qkActivation(c);
  e.inputs = {projected("q", Extent::Key, conv, qk, true), projected("k", Extent::Key, conv, qk, true),
              projected("v", Extent::Value, conv, Activation::Silu, false), plain("b", Extent::Head, "b_proj")};
  if (c.boolean("use_gate", false)) {
    e.inputs.push_back(plain("g", Extent::Value, "g_proj"));
    e.gate = "silu(g)";  // FusedRMSNormGated's default swish
  }
  e.q = "q", e.k = "k", e.v = "v";
  e.update = spec::UpdateKind::Delta;
  e.beta = "sigmoid(b)";
  e.flaNorm = "o_norm";
  return e;
}

void deltaNetWrite(const spec::VariantSpec& s, const model::MixerDims& d, nlohmann::ordered_json& j) {
  const spec::InputSpec* q = nullptr;
  bool gate = false;
  for (const auto& in : s.inputs) {
    if (in.name == "q") q = &in;
    if (in.name == "g") gate = true;
  }
  const int64_t conv = q ? q->conv : 0;
  j["num_heads"] = d.heads;
  j["expand_k"] = double(d.heads * d.keyDim) / double(d.hidden);
  j["expand_v"] = double(d.heads * d.valueDim) / double(d.hidden);
  j["use_gate"] = gate;
  j["use_short_conv"] = conv > 0;
  j["conv_size"] = conv > 0 ? conv : 4;
  j["use_beta"] = true;
  j["use_output_norm"] = true;
  j["allow_neg_eigval"] = false;
  j["qk_norm"] = "l2";
  const Activation act = q ? q->activation : Activation::Silu;
  j["qk_activation"] = act == Activation::Relu ? "relu" : act == Activation::Elu1 ? "elu"
                       : act == Activation::None ? "identity" : "silu";
  j["attn_mode"] = "chunk";
}

// ----- RetNet (fla/layers/multiscale_retention.py) -------------------------------------------

/// fla's retention decay: per head h, log(1 - 2^(-5 - h)) (fla/ops/retention).
constexpr const char* kRetentionDecay = "log(1 - pow(2, -5 - head))";

ExpectedSpec retnetExpected(const ConfigView& c, int64_t hidden) {
  c.require("feature_map", nullptr, "linac's RetNet applies no feature map to q and k");
  c.require("use_output_gate", true, "linac's RetNet spec has the output gate");
  c.require("elementwise_affine", true, "linac's output norm has a weight");
  ExpectedSpec e;
  e.heads = positive(c, "num_heads", 8);
  c.require("num_kv_heads", e.heads, "linac's RetNet has no grouped keys and values");
  e.keyDim = perHead(c, "expand_k", 1.0, hidden, e.heads);
  e.valueDim = perHead(c, "expand_v", 2.0, hidden, e.heads);
  const int64_t conv = shortConv(c, false);
  const Activation act = conv ? Activation::Silu : Activation::None;
  e.inputs = {projected("q", Extent::Key, conv, act, false), projected("k", Extent::Key, conv, act, false),
              projected("v", Extent::Value, conv, act, false), plain("g", Extent::Value, "g_proj")};
  e.inputs[0].rope = e.inputs[1].rope = true;  // fla's RotaryEmbedding on q and k, base 10000
  e.q = "q", e.k = "k", e.v = "v", e.decay = kRetentionDecay;
  e.gate = gateExpression(c, "hidden_act", "swish");
  e.flaNorm = c.boolean("fuse_norm", true) && e.gate == "silu(g)" ? "g_norm_swish_gate" : "g_norm";
  return e;
}

void retnetWrite(const spec::VariantSpec& s, const model::MixerDims& d, nlohmann::ordered_json& j) {
  glaWrite(s, d, j);  // the same fields: heads, expand_k / expand_v, conv, output gate, norm
  j.erase("clamp_min");
}

// ----- comparison ----------------------------------------------------------------------------

std::string canonical(const std::string& text) {
  return text.empty() ? "" : spec::toString(*spec::parseExpr(text, spec::SourceLoc{}));
}
std::string canonical(const spec::ExprPtr& e) { return e ? spec::toString(*e) : ""; }

template <typename T>
std::optional<std::string> differs(const std::string& what, const T& expected, const T& actual) {
  if (expected == actual) return std::nullopt;
  std::ostringstream out;
  out << what << ": " << expected << " in the fla layer, " << actual << " in the spec";
  return out.str();
}

std::optional<std::string> exprDiffers(const std::string& what, const std::string& expected, const spec::ExprPtr& actual) {
  const std::string a = canonical(expected), b = canonical(actual);
  if (a == b) return std::nullopt;
  return what + ": '" + (a.empty() ? "(none)" : a) + "' in the fla layer, '" + (b.empty() ? "(none)" : b) + "' in the spec";
}

}  // namespace

double ConfigView::number(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_number()) throw Unsupported(field(prefix_ + key) + " is " + j_.at(key).dump() + ", not a number");
  return j_.at(key).get<double>();
}

int64_t ConfigView::integer(const std::string& key, int64_t fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_number_integer()) throw Unsupported(field(prefix_ + key) + " is " + j_.at(key).dump() + ", not an integer");
  return j_.at(key).get<int64_t>();
}

bool ConfigView::boolean(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_boolean()) throw Unsupported(field(prefix_ + key) + " is " + j_.at(key).dump() + ", not true or false");
  return j_.at(key).get<bool>();
}

std::string ConfigView::string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_string()) throw Unsupported(field(prefix_ + key) + " is " + j_.at(key).dump() + ", not a string");
  return j_.at(key).get<std::string>();
}

void ConfigView::require(const std::string& key, const nlohmann::json& expected, const std::string& why) const {
  if (!has(key) || j_.at(key) == expected) return;
  throw Unsupported(field(prefix_ + key) + " is " + j_.at(key).dump() + " (linac needs " +
                    (expected.is_null() ? std::string("it unset") : expected.dump()) + ": " + why + ")");
}

const std::vector<FlaVariant>& flaVariants() {
  static const std::vector<FlaVariant> variants = {
      {"gla", "gla", "GLAForCausalLM", glaExpected, glaWrite},
      {"gated_deltanet", "gated_deltanet", "GatedDeltaNetForCausalLM", gdnExpected, gdnWrite},
      {"delta_net", "deltanet", "DeltaNetForCausalLM", deltaNetExpected, deltaNetWrite},
      {"retnet", "retnet", "RetNetForCausalLM", retnetExpected, retnetWrite},
  };
  return variants;
}

const FlaVariant* findByModelType(const std::string& modelType) {
  for (const auto& v : flaVariants())
    if (modelType == v.modelType) return &v;
  return nullptr;
}

const FlaVariant* findBySpec(const std::string& specName) {
  for (const auto& v : flaVariants())
    if (specName == v.spec) return &v;
  return nullptr;
}

std::optional<std::string> specDifference(const ExpectedSpec& e, const spec::VariantSpec& s, int64_t hidden) {
  if (s.kind != spec::VariantKind::Linear) return "the spec is not a linear variant";
  const runtime::VariantKernels* kernels = runtime::Registry::find(s.name);
  if (!kernels) return "no generated code for '" + s.name + "' is linked in (generate it with linac compile)";
  model::MixerDims d;
  try {
    d = model::resolveDims(*kernels, hidden);
  } catch (const std::exception& ex) {
    return std::string("the spec's key_dim / value_dim at hidden ") + std::to_string(hidden) + ": " + ex.what();
  }
  if (auto m = differs("heads", e.heads, d.heads)) return m;
  if (auto m = differs("key dim per head", e.keyDim, d.keyDim)) return m;
  if (auto m = differs("value dim per head", e.valueDim, d.valueDim)) return m;
  std::set<std::string> names;
  for (const auto& in : s.inputs) names.insert(in.name);
  for (const auto& want : e.inputs) {
    const spec::InputSpec* in = nullptr;
    for (const auto& i : s.inputs)
      if (i.name == want.name) in = &i;
    if (!in) return "input '" + want.name + "' of the fla layer is missing from the spec";
    names.erase(want.name);
    const std::string p = "input '" + want.name + "' ";
    if (auto m = differs(p + "extent", std::string(extentName(want.extent)), std::string(extentName(in->extent)))) return m;
    if (auto m = differs(p + "low_rank", want.lowRank, in->lowRank)) return m;
    if (auto m = differs(p + "bias", want.bias, in->bias)) return m;
    if (auto m = differs(p + "conv", want.conv, in->conv)) return m;
    if (auto m = differs(p + "activation", int(want.activation), int(in->activation))) return m;
    if (auto m = differs(p + "l2norm", want.l2norm, in->l2norm)) return m;
    if (auto m = differs(p + "rope", want.rope, in->rope)) return m;
    if (in->tokenShift) return p + "has token_shift, which the fla layer does not";
  }
  if (!names.empty()) return "input '" + *names.begin() + "' of the spec is not in the fla layer";
  if (auto m = differs("number of params", e.params.size(), s.params.size())) return m;
  for (const auto& want : e.params) {
    bool found = false;
    for (const auto& p : s.params) found = found || (p.name == want.name && p.extent == want.extent);
    if (!found) return "param '" + want.name + "' (extent " + extentName(want.extent) + ") is not in the spec";
  }
  if (auto m = differs("number of definitions", e.defs.size(), s.defs.size())) return m;
  for (size_t i = 0; i < e.defs.size(); ++i) {
    if (auto m = differs("definition " + std::to_string(i), e.defs[i].first, s.defs[i].name)) return m;
    if (auto m = exprDiffers("definition '" + e.defs[i].first + "'", e.defs[i].second, s.defs[i].expr)) return m;
  }
  const auto& r = s.recurrence;
  if (auto m = differs("recurrence state (0 matrix, 1 vector)", int(e.state), int(r.state))) return m;
  if (auto m = exprDiffers("recurrence q", e.q, r.q)) return m;
  if (auto m = exprDiffers("recurrence k", e.k, r.k)) return m;
  if (auto m = exprDiffers("recurrence v", e.v, r.v)) return m;
  if (auto m = exprDiffers("recurrence decay", e.decay, r.decay)) return m;
  if (auto m = differs("recurrence update (0 additive, 1 delta)", int(e.update), int(r.update))) return m;
  if (auto m = exprDiffers("recurrence beta", e.beta, r.beta)) return m;
  if (auto m = differs("recurrence readout (0 inclusive, 1 exclusive_bonus)", int(e.readout), int(r.readout))) return m;
  if (e.scale != r.scale) return "recurrence scale differs (fla's layer uses key_dim^-0.5 unless stated)";
  if (auto m = differs("output norm (0 none, 1 rmsnorm, 2 groupnorm, 3 layernorm)", int(e.norm), int(s.output.norm))) return m;
  if (auto m = exprDiffers("output gate", e.gate, s.output.gate)) return m;
  if (auto m = exprDiffers("output residual", e.residual, s.output.residual)) return m;
  return std::nullopt;
}

}  // namespace linac::interop::detail
