#include "interop/fla_checkpoint.h"

#include "interop/fla_variants.h"
#include "interop/safetensors.h"
#include "linac/Spec/SpecParser.h"
#include "model/attention_layer.h"
#include "model/layers.h"
#include "model/linear_layer.h"
#include "trainer/file_io.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace linac::interop {
namespace {

using detail::ConfigView;
using Json = nlohmann::json;

/// fla's default rope_theta of an attn entry, and the relative tolerance of compared floats.
constexpr double kFlaRopeTheta = 10000.0;
constexpr double kFloatTolerance = 1e-9;

bool close(double a, double b) { return std::abs(a - b) <= kFloatTolerance * std::max({1.0, std::abs(a), std::abs(b)}); }

int64_t requiredInteger(const ConfigView& c, const std::string& key) {
  if (!c.has(key)) throw Unsupported("config.json has no '" + key + "'");
  const int64_t v = c.integer(key, 0);
  if (v <= 0) throw Unsupported("config.json field '" + key + "' must be positive, got " + std::to_string(v));
  return v;
}

const detail::FlaVariant& variantOf(const ConfigView& c) {
  const std::string type = c.string("model_type", "");
  if (const detail::FlaVariant* v = detail::findByModelType(type)) return *v;
  std::string known;
  for (const auto& [fla, linac] : supportedModelTypes()) known += (known.empty() ? "" : ", ") + fla;
  throw Unsupported("config.json field 'model_type' is '" + type + "'; linac maps " + known);
}

/// fla's GatedMLP width: intermediate_size, else int(hidden * hidden_ratio * 2 / 3) rounded up to 256.
int64_t flaIntermediate(const ConfigView& c, int64_t hidden) {
  if (c.has("intermediate_size")) return requiredInteger(c, "intermediate_size");
  const double ratio = c.number("hidden_ratio", 4.0);
  const auto i = static_cast<int64_t>(double(hidden) * ratio * 2.0 / 3.0);
  return 256 * ((i + 255) / 256);
}

/// The one attn entry of the config (fla also allows a list of them).
const Json* attnEntry(const ConfigView& c) {
  if (!c.has("attn")) return nullptr;
  const Json& a = c.raw().at("attn");
  if (a.is_object()) return &a;
  if (a.is_array() && a.size() == 1 && a[0].is_object()) return &a[0];
  if (a.is_array() && a.empty()) return nullptr;
  throw Unsupported("config.json field 'attn' holds " + std::to_string(a.size()) +
                    " attention groups; linac's schedule has one kind of attention layer");
}

}  // namespace

std::vector<std::pair<std::string, std::string>> supportedModelTypes() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& v : detail::flaVariants()) out.emplace_back(v.modelType, v.spec);
  return out;
}

FlaModelShape describeFlaConfig(const nlohmann::json& config, const spec::VariantSpec& attention) {
  if (!config.is_object()) throw Unsupported("config.json is not a JSON object");
  const ConfigView c(config);
  FlaModelShape s;
  const detail::FlaVariant& v = variantOf(c);
  s.modelType = v.modelType;
  s.variant = v.spec;
  const double eps = c.number("norm_eps", 1e-6);
  if (!close(eps, model::kNormEps))
    throw Unsupported("config.json field 'norm_eps' is " + std::to_string(eps) + "; linac's norms use " +
                      std::to_string(model::kNormEps));
  c.require("hidden_act", "swish", "linac's MLP is SwiGLU");
  c.require("attnres_block_size", nullptr, "linac's blocks have plain residual connections");

  spec::PresetSpec& p = s.preset;
  p.name = "fla-" + s.modelType;
  p.hidden = requiredInteger(c, "hidden_size");
  p.layers = requiredInteger(c, "num_hidden_layers");
  p.vocab = requiredInteger(c, "vocab_size");
  p.intermediate = flaIntermediate(c, p.hidden);
  p.maxSeqLen = c.integer("max_position_embeddings", 2048);
  p.tieEmbeddings = c.boolean("tie_word_embeddings", false);

  s.schedule = "pure";
  p.attnHeads = attention.heads;
  if (const Json* a = attnEntry(c)) {
    const ConfigView ac(*a, "attn.");
    auto field = [](const std::string& key) { return "config.json field 'attn." + key + "'"; };
    if (!a->contains("layers") || !a->at("layers").is_array()) throw Unsupported(field("layers") + " is missing");
    std::set<int64_t> layers;
    for (const auto& l : a->at("layers")) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= p.layers)
        throw Unsupported(field("layers") + " holds " + l.dump() + ", not a layer index below " + std::to_string(p.layers));
      layers.insert(l.get<int64_t>());
    }
    if (!layers.empty()) {
      p.attnHeads = requiredInteger(ac, "num_heads");
      if (p.hidden % p.attnHeads) throw Unsupported(field("num_heads") + " does not divide hidden_size");
      ac.require("qkv_bias", false, "linac's attention projections have no bias");
      ac.require("window_size", nullptr, "linac's attention is not windowed");
      ac.require("qk_norm", false, "linac's attention does not normalise q and k");
      const int64_t kv = attention.attention.kvHeads > 0 ? attention.attention.kvHeads : p.attnHeads;
      ac.require("num_kv_heads", kv, "the kv heads of " + attention.file);
      const double theta = ac.number("rope_theta", kFlaRopeTheta);
      if (!attention.attention.rope || !close(theta, attention.attention.ropeTheta))
        throw Unsupported(field("rope_theta") + " is " + std::to_string(theta) + "; " + attention.file + " has " +
                          (attention.attention.rope ? "rope_theta " + std::to_string(attention.attention.ropeTheta)
                                                    : std::string("no RoPE")));
      const model::AttentionDims d = model::resolveAttentionDims(attention, p);
      if (d.heads * d.headDim != p.hidden)
        throw Unsupported("fla's attention has head dim hidden_size / num_heads = " + std::to_string(p.hidden / p.attnHeads) +
                          "; " + attention.file + " gives " + std::to_string(d.headDim));
      s.schedule = "[";
      for (int64_t l : layers) s.schedule += (s.schedule.size() > 1 ? "," : "") + std::to_string(l);
      s.schedule += "]";
    }
  }
  return s;
}

void checkLinearSpec(const nlohmann::json& config, const model::ModelConfig& mc) {
  const ConfigView c(config);
  const detail::FlaVariant& v = variantOf(c);
  const detail::ExpectedSpec expected = v.expected(c, mc.preset.hidden);
  if (auto diff = detail::specDifference(expected, mc.linear, mc.preset.hidden))
    throw Unsupported("config.json (model_type '" + std::string(v.modelType) + "') describes a layer that " +
                      mc.linear.file + " does not: " + *diff);
}

std::vector<ParamLink> parameterLinks(const model::ModelConfig& mc, const nlohmann::json& config) {
  const ConfigView c(config);
  const detail::FlaVariant& v = variantOf(c);
  const detail::ExpectedSpec expected = v.expected(c, mc.preset.hidden);
  const spec::PresetSpec& p = mc.preset;
  const model::MixerDims dims = model::resolveDims(model::linearKernels(mc), p.hidden);
  const int64_t inter = model::intermediateSize(p);
  std::vector<ParamLink> links;
  auto link = [&](std::string linac, std::string fla, std::vector<int64_t> shape, std::vector<int64_t> flaShape) {
    links.push_back({std::move(linac), std::move(fla), std::move(shape), std::move(flaShape)});
  };
  link("embed.weight", "model.embeddings.weight", {p.vocab, p.hidden}, {p.vocab, p.hidden});
  const std::vector<bool> attention = mc.schedule.expand(p.layers);
  for (int64_t i = 0; i < p.layers; ++i) {
    const std::string l = "blocks." + std::to_string(i) + ".", f = "model.layers." + std::to_string(i) + ".";
    link(l + "attn_norm", f + "attn_norm.weight", {p.hidden}, {p.hidden});
    link(l + "mlp_norm", f + "mlp_norm.weight", {p.hidden}, {p.hidden});
    link(l + "mlp_gate", f + "mlp.gate_proj.weight", {inter, p.hidden}, {inter, p.hidden});
    link(l + "mlp_up", f + "mlp.up_proj.weight", {inter, p.hidden}, {inter, p.hidden});
    link(l + "mlp_down", f + "mlp.down_proj.weight", {p.hidden, inter}, {p.hidden, inter});
    if (attention[size_t(i)]) {
      for (const auto& q : model::AttentionMixerImpl::plan(mc.attention, p))
        link(l + "mixer." + q.name, f + "attn." + q.name + ".weight", q.shape, q.shape);
      continue;
    }
    auto input = [&](const std::string& name) -> const detail::ExpectedInput& {
      for (const auto& in : expected.inputs)
        if (in.name == name) return in;
      throw Unsupported("the fla layer has no input '" + name + "' (" + mc.linear.file + ")");
    };
    for (const auto& q : model::LinearMixerImpl::plan(model::linearKernels(mc), p.hidden)) {
      const size_t us = q.name.find('_');
      const std::string kind = q.name.substr(0, us), rest = us == std::string::npos ? "" : q.name.substr(us + 1);
      std::string fla;
      std::vector<int64_t> flaShape = q.shape;
      if (kind == "proj") {
        const auto& in = input(rest);
        fla = in.lowRank > 0 ? in.flaProj + ".1.weight" : in.flaProj + ".weight";
      } else if (kind == "down") {
        fla = input(rest).flaProj + ".0.weight";
      } else if (kind == "bias") {
        const auto& in = input(rest);
        fla = in.lowRank > 0 ? in.flaProj + ".1.bias" : in.flaProj + ".bias";
      } else if (kind == "conv") {
        fla = input(rest).flaConv + ".weight";
      } else if (kind == "param") {
        for (const auto& par : expected.params)
          if (par.name == rest) fla = par.fla;
        if (fla.empty()) throw Unsupported("the fla layer has no parameter '" + rest + "'");
        if (q.shape.size() == 2 && q.shape[1] == 1) flaShape = {dims.heads};  // extent head: fla's [H]
      } else if (q.name == "norm_weight" || q.name == "norm_bias") {
        fla = expected.flaNorm + (q.name == "norm_weight" ? ".weight" : ".bias");
      } else if (q.name == "o_proj") {
        fla = "o_proj.weight";
      } else {
        throw Unsupported("linac parameter " + q.name + " of " + mc.linear.file + " has no fla counterpart");
      }
      link(l + "mixer." + q.name, f + "attn." + fla, q.shape, flaShape);
    }
  }
  link("final_norm", "model.norm.weight", {p.hidden}, {p.hidden});
  if (!p.tieEmbeddings) link("head.weight", "lm_head.weight", {p.vocab, p.hidden}, {p.vocab, p.hidden});
  return links;
}

std::map<std::string, torch::Tensor> importTensors(const std::vector<ParamLink>& links,
                                                   const std::map<std::string, torch::Tensor>& fla,
                                                   bool tiedEmbeddings) {
  std::map<std::string, torch::Tensor> state;
  std::set<std::string> used;
  auto shapeText = [](const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
  };
  for (const auto& l : links) {
    auto it = fla.find(l.fla);
    if (it == fla.end()) throw Unsupported("the checkpoint has no tensor " + l.fla + " (linac's " + l.linac + ")");
    const torch::Tensor& t = it->second;
    if (t.sizes().vec() != l.flaShape)
      throw Unsupported("tensor " + l.fla + " has shape " + shapeText(t.sizes().vec()) + ", linac's model needs " +
                        shapeText(l.flaShape) + " (config.json and the weights disagree?)");
    state[l.linac] = t.to(torch::kFloat32).reshape(l.linacShape).contiguous();
    used.insert(l.fla);
  }
  for (const auto& [name, t] : fla) {
    if (used.count(name)) continue;
    if (name == "lm_head.weight" && tiedEmbeddings && fla.count("model.embeddings.weight") &&
        torch::equal(t.to(torch::kFloat32), fla.at("model.embeddings.weight").to(torch::kFloat32)))
      continue;
    throw Unsupported("the checkpoint's tensor " + name + " has no place in linac's model (a parameter of a layer "
                      "option linac does not map, e.g. a conv bias); refusing to drop it");
  }
  return state;
}

FlaImport importFlaCheckpoint(const std::string& dir, const std::string& linearSpec,
                              const std::string& attentionSpec, const std::string& specsDir) {
  const auto text = trainer::detail::readFileIfExists(dir + "/config.json");
  if (!text) throw FormatError(dir + " has no config.json (an fla / Hugging Face model folder)");
  const Json config = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) throw FormatError(dir + "/config.json is not valid JSON");
  FlaImport out;
  model::ModelConfig& mc = out.config;
  mc.attention = spec::loadVariant(attentionSpec);
  out.shape = describeFlaConfig(config, mc.attention);
  mc.linear = spec::loadVariant(linearSpec.empty() ? specsDir + "/" + out.shape.variant + ".yaml" : linearSpec);
  mc.preset = out.shape.preset;
  mc.schedule = spec::loadSchedule(out.shape.schedule);
  checkLinearSpec(config, mc);
  out.state = importTensors(parameterLinks(mc, config), readModelTensors(dir), mc.preset.tieEmbeddings);
  return out;
}

void loadState(model::HybridLMImpl& lm, const std::map<std::string, torch::Tensor>& state) {
  torch::NoGradGuard noGrad;
  auto params = lm.named_parameters(/*recurse=*/true);
  if (params.size() != state.size())
    throw std::invalid_argument("loadState: the model has " + std::to_string(params.size()) + " parameters, the state " +
                                std::to_string(state.size()));
  for (auto& item : params) {
    auto it = state.find(item.key());
    if (it == state.end()) throw std::invalid_argument("loadState: no value for parameter " + item.key());
    if (!it->second.sizes().equals(item.value().sizes()))
      throw std::invalid_argument("loadState: parameter " + item.key() + " has another shape");
    item.value().copy_(it->second);
  }
}

nlohmann::ordered_json flaConfig(const model::ModelConfig& mc) {
  const detail::FlaVariant* v = detail::findBySpec(mc.linear.name);
  if (!v) {
    std::string known;
    for (const auto& [fla, linac] : supportedModelTypes()) known += (known.empty() ? "" : ", ") + linac;
    throw Unsupported("fla has no model linac maps for the spec '" + mc.linear.name + "' (exportable: " + known + ")");
  }
  const spec::PresetSpec& p = mc.preset;
  nlohmann::ordered_json j;
  j["architectures"] = {v->architecture};
  j["model_type"] = v->modelType;
  j["hidden_size"] = p.hidden;
  j["num_hidden_layers"] = p.layers;
  j["vocab_size"] = p.vocab;
  j["tie_word_embeddings"] = p.tieEmbeddings;
  j["hidden_ratio"] = 4;
  j["intermediate_size"] = model::intermediateSize(p);
  j["hidden_act"] = "swish";
  j["norm_eps"] = model::kNormEps;
  j["max_position_embeddings"] = p.maxSeqLen;
  j["initializer_range"] = model::kInitStd;
  j["fuse_norm"] = true;
  j["fuse_swiglu"] = true;
  j["fuse_cross_entropy"] = true;
  j["use_cache"] = true;
  v->write(mc.linear, model::resolveDims(model::linearKernels(mc), p.hidden), j);
  const std::vector<bool> attention = mc.schedule.expand(p.layers);
  std::vector<int64_t> layers;
  for (int64_t i = 0; i < p.layers; ++i)
    if (attention[size_t(i)]) layers.push_back(i);
  if (layers.empty()) {
    j["attn"] = nullptr;
  } else {
    const model::AttentionDims d = model::resolveAttentionDims(mc.attention, p);
    if (!mc.attention.attention.rope) throw Unsupported(mc.attention.file + " has no RoPE; fla's attention always has it");
    if (d.heads * d.headDim != p.hidden)
      throw Unsupported(mc.attention.file + ": head dim " + std::to_string(d.headDim) + " x " + std::to_string(d.heads) +
                        " heads is not hidden " + std::to_string(p.hidden) + " (fla's attention head dim is hidden / heads)");
    j["attn"] = {{"layers", layers}, {"num_heads", d.heads}, {"num_kv_heads", d.kvHeads}, {"qkv_bias", false},
                 {"window_size", nullptr}, {"rope_theta", mc.attention.attention.ropeTheta}};
  }
  // What fla will build from this config must be this model.
  const Json plain = Json::parse(j.dump());
  describeFlaConfig(plain, mc.attention);
  checkLinearSpec(plain, mc);
  return j;
}

void exportFlaCheckpoint(const model::ModelConfig& mc, const model::HybridLMImpl& lm, const std::string& dir,
                         torch::ScalarType dtype) {
  const nlohmann::ordered_json config = flaConfig(mc);
  const std::vector<ParamLink> links = parameterLinks(mc, Json::parse(config.dump()));
  std::map<std::string, torch::Tensor> params;
  for (const auto& item : lm.named_parameters(/*recurse=*/true)) params[item.key()] = item.value();
  if (params.size() != links.size())
    throw Unsupported("the model has " + std::to_string(params.size()) + " parameters, fla's layout " +
                      std::to_string(links.size()));
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& l : links) {
    auto it = params.find(l.linac);
    if (it == params.end()) throw Unsupported("the model has no parameter " + l.linac);
    tensors[l.fla] = it->second.detach().to(torch::kCPU).to(dtype).reshape(l.flaShape).contiguous();
  }
  trainer::detail::makeDirectories(dir);
  trainer::detail::writeFileAtomically(dir + "/config.json", config.dump(2) + "\n");
  writeSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
}

}  // namespace linac::interop
