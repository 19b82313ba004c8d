// YAML -> VariantSpec: the schema of specs/README.md, section by section, then the expression
// checks of ExprAnalysis.cpp. The first problem found is thrown as a SpecError.
#include "Internal.h"
#include "linac/Spec/Limits.h"
#include "linac/Spec/SpecParser.h"

#include <fmt/format.h>

#include <cctype>
#include <functional>

namespace linac::spec {
namespace {
using detail::MapReader;
using detail::YamlDoc;

// Chunk sizes the chunkwise kernels support: powers of two in this range.
constexpr int64_t kMinChunk = 16, kMaxChunk = 256;

const std::vector<std::pair<std::string, Extent>> kExtents = {
    {"scalar", Extent::Scalar}, {"head", Extent::Head}, {"key", Extent::Key},
    {"value", Extent::Value},   {"hidden", Extent::Hidden}};

bool isIdentifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

/// Tracks the names that inputs, params and defs introduce, so none is given twice.
class NameTable {
public:
  void add(const std::string& name, const SourceLoc& loc, const char* kind) {
    if (!isIdentifier(name))
      throw SpecError(loc, fmt::format("{} name '{}' must be letters, digits and '_', not starting with a digit", kind, name));
    if (detail::isBuiltinName(name))
      throw SpecError(loc, fmt::format("{} name '{}' is reserved for a built-in", kind, name));
    auto [it, inserted] = seen_.emplace(name, std::make_pair(loc, kind));
    if (!inserted)
      throw SpecError(loc, fmt::format("name '{}' is already defined as {} at line {}", name,
                                       it->second.second, it->second.first.line));
  }

private:
  std::map<std::string, std::pair<SourceLoc, const char*>> seen_;
};

/// Visits a free-form mapping (names chosen by the user) in file order.
void forEachEntry(const YamlDoc& doc, const MapReader& parent, const std::string& key,
                  const std::function<void(const std::string&, const SourceLoc&, const YAML::Node&)>& fn) {
  const YAML::Node* node = parent.find(key);
  if (!node) return;
  SourceLoc where = parent.valueLoc(key);
  if (node->IsNull()) return;  // `inputs:` with nothing under it
  if (!node->IsMap())
    throw SpecError(where, fmt::format("field '{}' must be a mapping of names", key));
  for (auto it = node->begin(); it != node->end(); ++it) {
    // Copies: the iterator's pair is a temporary proxy.
    const YAML::Node name = it->first;
    const YAML::Node value = it->second;
    SourceLoc kloc = doc.loc(name, where);
    if (!name.IsScalar()) throw SpecError(kloc, fmt::format("names in '{}' must be words", key));
    fn(name.Scalar(), kloc, value);
  }
}

DimSpec readDim(const MapReader& m, const std::string& key) {
  DimSpec d;
  d.loc = m.valueLoc(key);
  const YAML::Node& n = m.require(key);
  if (n.IsMap()) {
    MapReader r(m.doc(), n, d.loc, fmt::format("'{}'", key), {"expand"});
    d.expand = r.number("expand");
    if (d.expand <= 0)
      throw SpecError(r.valueLoc("expand"), fmt::format("field 'expand' must be positive, got {}", d.expand));
    return d;
  }
  d.absolute = m.integerIn(key, 1, limits::kMaxHeadDim);
  return d;
}

InputSpec readInput(const YamlDoc& doc, const std::string& name, const SourceLoc& loc, const YAML::Node& n) {
  InputSpec in;
  in.name = name;
  in.loc = loc;
  MapReader r(doc, n, loc, fmt::format("input '{}'", name),
              {"extent", "low_rank", "conv", "activation", "l2norm", "token_shift", "bias", "rope"});
  r.require("extent");
  in.extent = r.enumeration("extent", kExtents, Extent::Key, "extent");
  in.lowRank = r.integerInOr("low_rank", 1, limits::kMaxLowRank, 0);
  in.conv = r.integerInOr("conv", 1, limits::kMaxConv, 0);
  in.activation = r.enumeration<Activation>(
      "activation",
      {{"none", Activation::None}, {"silu", Activation::Silu}, {"swish", Activation::Swish},
       {"sigmoid", Activation::Sigmoid}, {"relu", Activation::Relu}, {"tanh", Activation::Tanh},
       {"elu1", Activation::Elu1}},
      Activation::None, "activation");
  in.l2norm = r.boolean("l2norm", false);
  in.tokenShift = r.boolean("token_shift", false);
  in.bias = r.boolean("bias", false);
  in.rope = r.boolean("rope", false);
  if (in.l2norm && (in.extent == Extent::Scalar || in.extent == Extent::Head))
    throw SpecError(r.keyLoc("l2norm"), fmt::format("input '{}': l2norm needs a key, value or hidden extent", name));
  if (in.rope && in.extent != Extent::Key)
    throw SpecError(r.keyLoc("rope"), fmt::format("input '{}': rope needs key extent", name));
  return in;
}

std::pair<double, double> readRange(const MapReader& r, const std::string& key) {
  const YAML::Node& n = r.require(key);
  SourceLoc loc = r.valueLoc(key);
  if (!n.IsSequence() || n.size() != 2)
    throw SpecError(loc, fmt::format("init '{}' takes a range [low, high]", key));
  double v[2];
  for (size_t i = 0; i < 2; ++i) {
    const YAML::Node& x = n[i];
    if (!x.IsScalar() || !detail::parseDouble(x.Scalar(), v[i]) || !detail::fitsFloat32(v[i]))
      throw SpecError(r.doc().loc(x, loc), fmt::format("init '{}' bounds must be finite float32 numbers", key));
  }
  if (!(v[0] < v[1])) throw SpecError(loc, fmt::format("init '{}' range [{}, {}] is empty", key, v[0], v[1]));
  return {v[0], v[1]};
}

InitSpec readInit(const MapReader& p) {
  InitSpec init;
  if (!p.has("init")) return init;
  init.loc = p.valueLoc("init");
  const YAML::Node& n = p.require("init");
  if (n.IsScalar()) {
    init.kind = p.enumeration<InitKind>("init", {{"zeros", InitKind::Zeros}, {"ones", InitKind::Ones}},
                                        InitKind::Zeros, "init");
    return init;
  }
  const std::vector<std::string> kinds = {"constant", "normal", "uniform", "log_uniform", "dt_bias"};
  MapReader r(p.doc(), n, init.loc, "init", kinds);
  if (r.keys().size() != 1)
    throw SpecError(init.loc, fmt::format("init takes exactly one of: {}, or the words zeros / ones", detail::joinNames(kinds)));
  const std::string& kind = r.keys().front();
  if (kind == "constant") {
    init.kind = InitKind::Constant;
    init.a = r.float32(kind);
  } else if (kind == "normal") {
    init.kind = InitKind::Normal;
    init.a = r.float32(kind);
    if (init.a <= 0) throw SpecError(r.valueLoc(kind), fmt::format("normal init std must be positive, got {}", init.a));
  } else {
    init.kind = kind == "uniform" ? InitKind::Uniform : kind == "log_uniform" ? InitKind::LogUniform : InitKind::DtBias;
    std::tie(init.a, init.b) = readRange(r, kind);
    if (init.kind != InitKind::Uniform && init.a <= 0)
      throw SpecError(r.valueLoc(kind), fmt::format("{} init needs a positive range, got [{}, {}]", kind, init.a, init.b));
  }
  return init;
}

void readRecurrence(const YamlDoc& doc, const MapReader& top, VariantSpec& spec) {
  RecurrenceSpec& rec = spec.recurrence;
  const YAML::Node& n = top.require("recurrence");
  rec.loc = top.valueLoc("recurrence");
  MapReader r(doc, n, rec.loc, "recurrence",
              {"state", "q", "k", "v", "decay", "update", "beta", "readout", "bonus", "scale"});
  rec.state = r.enumeration<StateKind>("state", {{"matrix", StateKind::Matrix}, {"vector", StateKind::Vector}},
                                       StateKind::Matrix, "state");
  const bool matrix = rec.state == StateKind::Matrix;
  if (!matrix) {
    for (const char* f : {"q", "k", "scale"})
      if (r.has(f)) throw SpecError(r.keyLoc(f), fmt::format("field '{}' is not used with state: vector", f));
  }
  rec.q = r.expr("q", matrix);
  rec.k = r.expr("k", matrix);
  rec.v = r.expr("v", true);
  rec.decay = r.expr("decay", false);
  rec.update = r.enumeration<UpdateKind>("update", {{"additive", UpdateKind::Additive}, {"delta", UpdateKind::Delta}},
                                         UpdateKind::Additive, "update rule");
  if (rec.update == UpdateKind::Delta && !matrix)
    throw SpecError(r.valueLoc("update"), "update: delta needs state: matrix");
  if (rec.update == UpdateKind::Delta && !r.has("beta"))
    throw SpecError(r.loc(), "missing required field 'beta' in recurrence (update: delta needs it)");
  if (rec.update != UpdateKind::Delta && r.has("beta"))
    throw SpecError(r.keyLoc("beta"), "field 'beta' is only used with update: delta");
  rec.beta = r.expr("beta", false);
  rec.readout = r.enumeration<ReadoutKind>(
      "readout", {{"inclusive", ReadoutKind::Inclusive}, {"exclusive_bonus", ReadoutKind::ExclusiveBonus}},
      ReadoutKind::Inclusive, "readout");
  if (rec.readout == ReadoutKind::ExclusiveBonus) {
    if (!matrix) throw SpecError(r.valueLoc("readout"), "readout: exclusive_bonus needs state: matrix");
    if (!r.has("bonus"))
      throw SpecError(r.loc(), "missing required field 'bonus' in recurrence (readout: exclusive_bonus needs it)");
    rec.bonus = r.string("bonus");
    auto it = std::find_if(spec.params.begin(), spec.params.end(), [&](const ParamSpec& p) { return p.name == rec.bonus; });
    if (it == spec.params.end()) {
      std::vector<std::string> names;
      for (const ParamSpec& p : spec.params) names.push_back(p.name);
      throw detail::unknownWord(r.valueLoc("bonus"), "bonus parameter", rec.bonus, names);
    }
    if (it->extent != Extent::Key)
      throw SpecError(r.valueLoc("bonus"), fmt::format("bonus parameter '{}' must have key extent, got {}",
                                                       rec.bonus, extentName(it->extent)));
  } else if (r.has("bonus")) {
    throw SpecError(r.keyLoc("bonus"), "field 'bonus' is only used with readout: exclusive_bonus");
  }
  if (r.has("scale")) {
    rec.scale = r.float32("scale");
    // Positive also as a float32: a value that rounds to 0 would zero the scores.
    if (!(static_cast<float>(*rec.scale) > 0))
      throw SpecError(r.valueLoc("scale"), fmt::format("field 'scale' must be positive, got {}", *rec.scale));
  }
}

void readOutput(const YamlDoc& doc, const MapReader& top, VariantSpec& spec) {
  OutputSpec& out = spec.output;
  out.loc = top.keyLoc("output");
  if (!top.has("output")) return;
  MapReader r(doc, top.require("output"), top.valueLoc("output"), "output", {"norm", "gate", "residual"});
  out.loc = r.loc();
  out.norm = r.enumeration<NormKind>("norm",
                                     {{"rmsnorm", NormKind::RMSNorm}, {"groupnorm", NormKind::GroupNorm},
                                      {"layernorm", NormKind::LayerNorm}, {"none", NormKind::None}},
                                     NormKind::RMSNorm, "norm");
  out.gate = r.expr("gate", false);
  out.residual = r.expr("residual", false);
}

void readAttention(const MapReader& top, VariantSpec& spec) {
  if (!top.has("attention")) return;
  MapReader r(top.doc(), top.require("attention"), top.valueLoc("attention"), "attention",
              {"kv_heads", "rope", "rope_theta"});
  spec.attention.kvHeads = r.integerInOr("kv_heads", 1, spec.heads, 0);
  if (spec.attention.kvHeads && spec.heads % spec.attention.kvHeads != 0)
    throw SpecError(r.valueLoc("kv_heads"), fmt::format("kv_heads {} does not divide heads {}",
                                                        spec.attention.kvHeads, spec.heads));
  spec.attention.rope = r.boolean("rope", true);
  if (r.has("rope_theta")) {
    spec.attention.ropeTheta = r.float32("rope_theta");
    if (spec.attention.ropeTheta <= 0)
      throw SpecError(r.valueLoc("rope_theta"), fmt::format("field 'rope_theta' must be positive, got {}", spec.attention.ropeTheta));
  }
}

}  // namespace

VariantSpec parseVariant(std::string_view text, const std::string& file) {
  YamlDoc doc(text, file, "spec");
  MapReader top(doc, doc.root(), SourceLoc{file, 1, 1}, "variant",
                {"name", "kind", "description", "heads", "key_dim", "value_dim", "inputs", "params",
                 "define", "recurrence", "output", "attention", "chunk"});
  VariantSpec spec;
  spec.file = file;
  spec.hash = sha256Hex(text);
  spec.loc = top.loc();
  spec.name = top.string("name");
  if (!isIdentifier(spec.name))
    throw SpecError(top.valueLoc("name"), fmt::format("variant name '{}' must be letters, digits and '_'", spec.name));
  spec.kind = top.enumeration<VariantKind>("kind", {{"linear", VariantKind::Linear}, {"attention", VariantKind::Attention}},
                                           VariantKind::Linear, "kind");
  spec.description = top.stringOr("description", "");
  spec.heads = top.integerIn("heads", 1, limits::kMaxHeads);
  spec.chunk = top.integerInOr("chunk", kMinChunk, kMaxChunk, spec.chunk);
  if ((spec.chunk & (spec.chunk - 1)) != 0)
    throw SpecError(top.valueLoc("chunk"), fmt::format("chunk must be a power of two in [{}, {}], got {}",
                                                       kMinChunk, kMaxChunk, spec.chunk));

  if (spec.kind == VariantKind::Attention) {
    for (const char* f : {"value_dim", "inputs", "params", "define", "recurrence", "output"})
      if (top.has(f)) throw SpecError(top.keyLoc(f), fmt::format("field '{}' is not used by kind: attention", f));
    spec.keyDim = readDim(top, "key_dim");
    spec.valueDim = spec.keyDim;
    spec.output.norm = NormKind::None;
    readAttention(top, spec);
    return spec;
  }
  if (top.has("attention")) throw SpecError(top.keyLoc("attention"), "field 'attention' is only used by kind: attention");

  // Vector state (HGRN) has no keys: its channels are the value dimension (value_dim, or key_dim
  // when only that is given). Matrix state needs key_dim; value_dim defaults to key_dim.
  const YAML::Node& recNode = top.require("recurrence");
  const bool vector = recNode.IsMap() && recNode["state"] && recNode["state"].IsScalar() &&
                      recNode["state"].Scalar() == "vector";
  if (vector) {
    spec.valueDim = top.has("value_dim") || !top.has("key_dim") ? readDim(top, "value_dim") : readDim(top, "key_dim");
    spec.keyDim = top.has("key_dim") ? readDim(top, "key_dim") : spec.valueDim;
  } else {
    spec.keyDim = readDim(top, "key_dim");
    spec.valueDim = top.has("value_dim") ? readDim(top, "value_dim") : spec.keyDim;
  }

  NameTable names;
  forEachEntry(doc, top, "inputs", [&](const std::string& name, const SourceLoc& loc, const YAML::Node& n) {
    names.add(name, loc, "an input");
    spec.inputs.push_back(readInput(doc, name, loc, n));
  });
  forEachEntry(doc, top, "params", [&](const std::string& name, const SourceLoc& loc, const YAML::Node& n) {
    names.add(name, loc, "a param");
    ParamSpec p;
    p.name = name;
    p.loc = loc;
    MapReader r(doc, n, loc, fmt::format("param '{}'", name), {"extent", "init"});
    r.require("extent");
    p.extent = r.enumeration("extent", kExtents, Extent::Head, "extent");
    if (p.extent == Extent::Hidden)
      throw SpecError(r.valueLoc("extent"), fmt::format("param '{}': extent hidden is for inputs only", name));
    p.init = readInit(r);
    spec.params.push_back(p);
  });
  forEachEntry(doc, top, "define", [&](const std::string& name, const SourceLoc& loc, const YAML::Node& n) {
    names.add(name, loc, "a definition");
    if (!n.IsScalar()) throw SpecError(doc.loc(n, loc), fmt::format("definition '{}' must be an expression string", name));
    spec.defs.push_back(DefSpec{name, loc, detail::parseExprAt(n.Scalar(), doc.valueOrigin(n, loc))});
  });

  readRecurrence(doc, top, spec);
  readOutput(doc, top, spec);
  detail::analyzeVariant(spec);
  return spec;
}

VariantSpec loadVariant(const std::string& path) { return parseVariant(detail::readFile(path), path); }

}  // namespace linac::spec
