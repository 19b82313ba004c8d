// linac import / export of fla checkpoints (runtime/interop): safetensors files, export ->
// import parity (same parameters, same logits), refusals that name the config field, and the
// import of fla-format checkpoints against fla_reference.py's float64 logits.
#include "interop/fla_checkpoint.h"
#include "interop/safetensors.h"

#include "linac/Spec/SpecParser.h"
#include "model/layers.h"
#include "trainer/file_io.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <unistd.h>

namespace linac::interop {
namespace {

const std::string kSpecs = LINAC_SPECS_DIR;

std::string tempDir(const std::string& name) {
  const std::string dir = "/tmp/linac_interop_" + std::to_string(::getpid()) + "_" + name;
  if (trainer::detail::pathExists(dir)) trainer::detail::removeTree(dir);
  trainer::detail::makeDirectories(dir);
  return dir;
}

model::ModelConfig config(const std::string& linear, const std::string& schedule, int64_t hidden, int64_t layers,
                          bool tie) {
  model::ModelConfig c;
  c.preset = spec::loadPreset("tiny", kSpecs + "/presets");
  c.preset.hidden = hidden;
  c.preset.layers = layers;
  c.preset.tieEmbeddings = tie;
  c.linear = spec::loadVariant(kSpecs + "/" + linear + ".yaml");
  c.attention = spec::loadVariant(kSpecs + "/attention.yaml");
  c.schedule = spec::loadSchedule(schedule);
  return c;
}

torch::Tensor tokens(int64_t vocab) {
  torch::manual_seed(3);
  return torch::randint(0, vocab, {2, 19}, torch::kInt64);
}

TEST(Safetensors, RoundTripsEveryDtypeAndRejectsDamage) {
  const std::string dir = tempDir("st");
  std::map<std::string, torch::Tensor> t = {{"a.weight", torch::randn({3, 5})},
                                            {"b", torch::randn({7}).to(torch::kBFloat16)},
                                            {"c", torch::randn({2, 1, 4}).to(torch::kFloat16)},
                                            {"d", torch::randn({2}, torch::kFloat64)}};
  writeSafetensors(dir + "/x.safetensors", t, {{"format", "pt"}});
  const TensorFile back = readSafetensors(dir + "/x.safetensors");
  EXPECT_EQ(back.metadata.at("format"), "pt");
  ASSERT_EQ(back.tensors.size(), t.size());
  for (const auto& [name, v] : t) {
    EXPECT_EQ(back.tensors.at(name).scalar_type(), v.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(back.tensors.at(name), v)) << name;
  }
  // Truncated: the last tensor's bytes are missing.
  std::string bytes = *trainer::detail::readFileIfExists(dir + "/x.safetensors");
  trainer::detail::writeFileAtomically(dir + "/short.safetensors", bytes.substr(0, bytes.size() - 4));
  EXPECT_THROW(readSafetensors(dir + "/short.safetensors"), FormatError);
  trainer::detail::writeFileAtomically(dir + "/junk.safetensors", "not a safetensors file at all");
  EXPECT_THROW(readSafetensors(dir + "/junk.safetensors"), FormatError);
  trainer::detail::removeTree(dir);
}

TEST(Safetensors, ReadsShardsThroughTheIndex) {
  const std::string dir = tempDir("shards");
  writeSafetensors(dir + "/model-00001-of-00002.safetensors", {{"x", torch::ones({2})}}, {});
  writeSafetensors(dir + "/model-00002-of-00002.safetensors", {{"y", torch::zeros({3})}}, {});
  trainer::detail::writeFileAtomically(dir + "/model.safetensors.index.json",
                                       R"({"metadata": {}, "weight_map": {"x": "model-00001-of-00002.safetensors",
                                           "y": "model-00002-of-00002.safetensors"}})");
  const auto t = readModelTensors(dir);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(torch::equal(t.at("x"), torch::ones({2})));
  EXPECT_TRUE(torch::equal(t.at("y"), torch::zeros({3})));
  trainer::detail::removeTree(dir);
}

// Export a randomly initialised linac model, import it back: the same parameters bit for bit
// and the same logits.
void roundTrip(const model::ModelConfig& c) {
  torch::manual_seed(1);
  model::HybridLM lm(c);
  const std::string dir = tempDir("rt_" + c.linear.name);
  exportFlaCheckpoint(c, *lm, dir, torch::kFloat32);
  const FlaImport back = importFlaCheckpoint(dir, "", kSpecs + "/attention.yaml", kSpecs);
  EXPECT_EQ(back.config.linear.name, c.linear.name);
  EXPECT_EQ(back.config.schedule.expand(c.preset.layers), c.schedule.expand(c.preset.layers));
  EXPECT_EQ(back.config.preset.hidden, c.preset.hidden);
  EXPECT_EQ(back.config.preset.tieEmbeddings, c.preset.tieEmbeddings);
  EXPECT_EQ(model::intermediateSize(back.config.preset), model::intermediateSize(c.preset));
  model::HybridLM imported(back.config);
  loadState(*imported, back.state);
  for (const auto& item : lm->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), imported->named_parameters()[item.key()])) << item.key();
  torch::NoGradGuard noGrad;
  const torch::Tensor x = tokens(c.preset.vocab);
  EXPECT_TRUE(torch::equal(lm->forward(x), imported->forward(x)));
  trainer::detail::removeTree(dir);
}

TEST(FlaCheckpoint, ExportImportRoundTripGlaPure) { roundTrip(config("gla", "pure", 64, 2, false)); }
TEST(FlaCheckpoint, ExportImportRoundTripGatedDeltaNetHybrid) {
  roundTrip(config("gated_deltanet", "1:1", 64, 4, true));
}
TEST(FlaCheckpoint, ExportImportRoundTripDeltaNet) { roundTrip(config("deltanet", "3:1", 64, 4, false)); }
TEST(FlaCheckpoint, ExportImportRoundTripRetNet) { roundTrip(config("retnet", "pure", 64, 2, false)); }

TEST(FlaCheckpoint, ExportRefusesASpecFlaHasNoModelFor) {
  const model::ModelConfig c = config("hgrn2", "pure", 64, 2, false);
  try {
    flaConfig(c);
    FAIL() << "hgrn2 exported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("hgrn2"), std::string::npos) << e.what();
  }
}

nlohmann::json glaConfig() {
  return {{"model_type", "gla"}, {"hidden_size", 64}, {"num_hidden_layers", 2}, {"vocab_size", 256},
          {"num_heads", 4}, {"expand_k", 0.5}, {"expand_v", 1.0}, {"norm_eps", 1e-6}, {"hidden_act", "swish"},
          {"tie_word_embeddings", false}, {"attn", nullptr}};
}

/// The error describeFlaConfig + checkLinearSpec give for `config` with the gla spec ("" if none).
std::string refusal(const nlohmann::json& config) {
  try {
    model::ModelConfig mc = ::linac::interop::config("gla", "pure", 64, 2, false);
    const FlaModelShape shape = describeFlaConfig(config, mc.attention);
    mc.preset = shape.preset;
    mc.schedule = spec::loadSchedule(shape.schedule);
    checkLinearSpec(config, mc);
  } catch (const Unsupported& e) {
    return e.what();
  }
  return "";
}

TEST(FlaCheckpoint, RefusesConfigsTheSpecCannotExpressNamingTheField) {
  EXPECT_EQ(refusal(glaConfig()), "");
  auto with = [](const char* key, nlohmann::json value) {
    nlohmann::json c = glaConfig();
    c[key] = value;
    return c;
  };
  const std::pair<nlohmann::json, std::string> cases[] = {
      {with("feature_map", "relu"), "'feature_map'"},
      {with("norm_eps", 1e-5), "'norm_eps'"},
      {with("hidden_act", "gelu"), "'hidden_act'"},
      {with("clamp_min", -5.0), "'clamp_min'"},
      {with("num_kv_heads", 2), "'num_kv_heads'"},
      {with("model_type", "mamba"), "'model_type'"},
      {with("num_heads", 8), "heads"},  // the spec has 4: dims differ
      {with("use_short_conv", true), "input 'q' conv"},
      {with("attn", {{"layers", {1}}, {"num_heads", 4}, {"qkv_bias", true}}), "'attn.qkv_bias'"},
      {with("attn", {{"layers", {1}}, {"num_heads", 4}, {"window_size", 512}}), "'attn.window_size'"},
      {with("attn", {{"layers", {1}}, {"num_heads", 4}, {"rope_theta", 500000.0}}), "'attn.rope_theta'"},
      {with("attn", {{"layers", {7}}, {"num_heads", 4}}), "'attn.layers'"},
  };
  for (const auto& [c, field] : cases) {
    const std::string message = refusal(c);
    EXPECT_NE(message.find(field), std::string::npos) << c.dump() << " -> '" << message << "'";
  }
}

TEST(FlaCheckpoint, RefusesATensorItWouldDrop) {
  const model::ModelConfig c = config("gla", "pure", 64, 2, false);
  torch::manual_seed(1);
  model::HybridLM lm(c);
  const std::string dir = tempDir("extra");
  exportFlaCheckpoint(c, *lm, dir, torch::kFloat32);
  auto tensors = readModelTensors(dir);
  tensors["model.layers.0.attn.q_conv1d.bias"] = torch::zeros({32});
  writeSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  try {
    importFlaCheckpoint(dir, "", kSpecs + "/attention.yaml", kSpecs);
    FAIL() << "imported a checkpoint with an unmapped tensor";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("q_conv1d.bias"), std::string::npos) << e.what();
  }
  trainer::detail::removeTree(dir);
}

// fla-format checkpoints written by fla_reference.py (or, on the H200, by fla itself:
// fla_real_reference.py), each with reference.safetensors {tokens, logits}: linac's logits after
// import must match within LINAC_FLA_REFERENCE_TOL (relative to the largest logit; default fp32).
TEST(FlaCheckpoint, ImportMatchesReferenceLogits) {
  const char* root = std::getenv("LINAC_FLA_REFERENCE_DIR");
  if (!root) GTEST_SKIP() << "LINAC_FLA_REFERENCE_DIR is not set (ctest sets it after fla_reference.py)";
  const char* tolText = std::getenv("LINAC_FLA_REFERENCE_TOL");
  const double tol = tolText ? std::atof(tolText) : 1e-4;
  const char* deviceText = std::getenv("LINAC_FLA_REFERENCE_DEVICE");
  const torch::Device device(deviceText ? deviceText : "cpu");
  int checked = 0;
  for (const auto& name : trainer::detail::listDirectory(root)) {
    const std::string dir = std::string(root) + "/" + name;
    if (!trainer::detail::pathExists(dir + "/reference.safetensors")) continue;
    SCOPED_TRACE(dir);
    const FlaImport imported = importFlaCheckpoint(dir, "", kSpecs + "/attention.yaml", kSpecs);
    model::HybridLM lm(imported.config);
    loadState(*lm, imported.state);
    lm->to(device);
    lm->eval();
    const TensorFile ref = readSafetensors(dir + "/reference.safetensors");
    const torch::Tensor x = ref.tensors.at("tokens").to(torch::kInt64).to(device);
    const torch::Tensor want = ref.tensors.at("logits").to(torch::kFloat64);
    torch::NoGradGuard noGrad;
    const torch::Tensor got = lm->forward(x).to(torch::kCPU, torch::kFloat64);
    ASSERT_EQ(got.sizes(), want.sizes());
    const double err = (got - want).abs().max().item<double>(), scale = want.abs().max().item<double>();
    std::cout << name << ": max |linac - reference| = " << err << " (largest logit " << scale << ")\n";
    EXPECT_LE(err, tol * scale) << name;
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no case with reference.safetensors under " << root;
}

}  // namespace
}  // namespace linac::interop
