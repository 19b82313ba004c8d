// The fla model types linac maps (fla_checkpoint.h): for each, the linac spec that an fla config
// describes, the fla names of the mixer's parameters, and the inverse (a linac spec's fla
// config fields). Internal to runtime/interop.
#pragma once

#include "interop/fla_checkpoint.h"
#include "model/roles.h"

#include <optional>

namespace linac::interop::detail {

/// config.json's fields read with fla's defaults for absent ones; a mistyped value throws
/// Unsupported naming the field.
class ConfigView {
public:
  /// `prefix` names a nested object in messages ("attn.").
  explicit ConfigView(const nlohmann::json& j, std::string prefix = "") : j_(j), prefix_(std::move(prefix)) {}
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  double number(const std::string& key, double fallback) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  /// Throws Unsupported unless the field is absent, null or equal to `expected`.
  void require(const std::string& key, const nlohmann::json& expected, const std::string& why) const;
  const nlohmann::json& raw() const { return j_; }

private:
  const nlohmann::json& j_;
  std::string prefix_;
};

/// One input of the expected spec and its fla modules.
struct ExpectedInput {
  std::string name;
  spec::Extent extent = spec::Extent::Key;
  int64_t lowRank = 0;
  bool bias = false;
  int64_t conv = 0;
  spec::Activation activation = spec::Activation::None;
  bool l2norm = false;
  bool rope = false;
  std::string flaProj;  // "q_proj" (a low-rank input: fla's nn.Sequential of two Linears)
  std::string flaConv;  // "q_conv1d" when conv > 0
};

struct ExpectedParam {
  std::string name;
  spec::Extent extent = spec::Extent::Head;
  std::string fla;  // fla's parameter name within the layer ("A_log")
};

/// The linear spec an fla config describes at the model's width.
struct ExpectedSpec {
  int64_t heads = 0, keyDim = 0, valueDim = 0;  // per head
  std::vector<ExpectedInput> inputs;
  std::vector<ExpectedParam> params;
  std::vector<std::pair<std::string, std::string>> defs;  // name, expression
  spec::StateKind state = spec::StateKind::Matrix;
  std::string q, k, v, decay, beta;  // expressions; "" where the spec has none
  spec::UpdateKind update = spec::UpdateKind::Additive;
  spec::ReadoutKind readout = spec::ReadoutKind::Inclusive;
  std::optional<double> scale;
  spec::NormKind norm = spec::NormKind::RMSNorm;
  std::string gate, residual;
  std::string flaNorm;  // fla's module holding the output norm's weight ("o_norm")
};

struct FlaVariant {
  const char* modelType;     // config.json's model_type
  const char* spec;          // linac spec name
  const char* architecture;  // config.json's architectures[0]
  /// The spec `config` describes at width `hidden`; throws Unsupported naming the field.
  ExpectedSpec (*expected)(const ConfigView& config, int64_t hidden);
  /// The variant's config fields for a linear spec of dims `d` (the inverse of `expected`;
  /// export then checks expected(config) against the spec).
  void (*write)(const spec::VariantSpec& spec, const model::MixerDims& d, nlohmann::ordered_json& config);
};

const std::vector<FlaVariant>& flaVariants();
/// nullptr when linac maps no such model type.
const FlaVariant* findByModelType(const std::string& modelType);
const FlaVariant* findBySpec(const std::string& specName);

/// The first difference between `expected` and `actual` at width `hidden` ("input gk: low_rank
/// 16 in the config's layer, 32 in the spec"), nullopt when they are the same model.
std::optional<std::string> specDifference(const ExpectedSpec& expected, const spec::VariantSpec& actual,
                                          int64_t hidden);

}  // namespace linac::interop::detail
