// fla (flash-linear-attention) / Hugging Face checkpoints <-> linac's model (DESIGN.md section 5
// follows fla's layers). A checkpoint is a folder with config.json and model.safetensors (or
// shards with model.safetensors.index.json), as fla's models write it with save_pretrained,
// including the hybrid layout where config.attn = {"layers": [...], "num_heads": ...} makes the
// listed layers full attention.
//
// The mapping is explicit per fla model_type (fla_variants.cpp): which linac spec it is, the
// spec that fla's config describes (inputs, short convs, gates, norms, expressions, dims), the
// parameter names on both sides. Import builds that expected spec from config.json and compares
// it with the linac spec it is asked to load into, field by field; a config the spec cannot
// express (another gate activation, a feature map, a norm eps linac does not use, ...) is
// refused with an error naming the config field, never loaded approximately. Export goes the
// other way and refuses a spec that no fla config describes.
#pragma once

#include "model/model.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace linac::interop {

/// A config.json (or a linac model, for export) that the other side cannot represent; the
/// message names the field.
class Unsupported : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The fla model types linac maps, with the linac spec name of each ("gla" -> "gla",
/// "gated_deltanet" -> "gated_deltanet", "delta_net" -> "deltanet", ...).
std::vector<std::pair<std::string, std::string>> supportedModelTypes();

/// What an fla config.json describes in linac's terms.
struct FlaModelShape {
  std::string modelType;        // config.json's model_type
  std::string variant;          // the linac spec name it maps to
  spec::PresetSpec preset;      // hidden, layers, vocab, attention heads, MLP width, tie, max length
  std::string schedule;         // "pure", or the attention layers "[3,7,11]" (fla's attn.layers)
};

/// Reads config.json's model-level fields (sizes, MLP, norm eps, the attn layout and its
/// attention settings) checked against `attention` (linac's attention spec). Throws Unsupported.
FlaModelShape describeFlaConfig(const nlohmann::json& config, const spec::VariantSpec& attention);

/// Throws Unsupported naming the first config field whose value `mc.linear` (at mc.preset's
/// width) does not express: the spec fla's config describes compared with mc.linear.
void checkLinearSpec(const nlohmann::json& config, const model::ModelConfig& mc);

/// One parameter on both sides: linac's name (HybridLM's named_parameters) and shape, fla's.
struct ParamLink {
  std::string linac, fla;
  std::vector<int64_t> linacShape, flaShape;
};
/// Every parameter of HybridLM(mc) with its fla name (`config` picks names fla varies by config,
/// e.g. GLA's g_norm / g_norm_swish_gate). Throws Unsupported for a spec fla has no layer for.
std::vector<ParamLink> parameterLinks(const model::ModelConfig& mc, const nlohmann::json& config);

/// fla's tensors -> linac's (name -> float32 tensor in linac's shape). Every link must find its
/// tensor with fla's shape; a tensor no link uses is an error (a parameter linac would drop),
/// except lm_head.weight equal to the embeddings of a tied model. Throws Unsupported.
std::map<std::string, torch::Tensor> importTensors(const std::vector<ParamLink>& links,
                                                   const std::map<std::string, torch::Tensor>& fla,
                                                   bool tiedEmbeddings);

/// The model of an fla checkpoint folder as linac sees it.
struct FlaImport {
  FlaModelShape shape;
  model::ModelConfig config;                    // preset as in `shape`, the given specs
  std::map<std::string, torch::Tensor> state;   // linac parameter name -> float32 tensor
};
/// Reads DIR/config.json and its safetensors into the model of `linearSpec` / `attentionSpec`
/// (files). An empty linearSpec means `specsDir`/<variant>.yaml.
FlaImport importFlaCheckpoint(const std::string& dir, const std::string& linearSpec,
                              const std::string& attentionSpec, const std::string& specsDir);

/// Copies `state` into `lm`'s parameters (names and shapes must match exactly).
void loadState(model::HybridLMImpl& lm, const std::map<std::string, torch::Tensor>& state);

/// fla's config.json for the model `mc` describes (throws Unsupported for a spec or schedule
/// no fla config expresses).
nlohmann::ordered_json flaConfig(const model::ModelConfig& mc);

/// Writes DIR/config.json and DIR/model.safetensors (fla's names and shapes, tensors cast to
/// `dtype`) for `lm`, built from `mc`. DIR is created.
void exportFlaCheckpoint(const model::ModelConfig& mc, const model::HybridLMImpl& lm, const std::string& dir,
                         torch::ScalarType dtype);

}  // namespace linac::interop
