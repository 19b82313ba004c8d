// `linac memory SPEC --schedule S --preset P --context L [--batch B] [--dtype bf16] [--json]`: the
// bytes of a hybrid model's inference caches (recurrent state, short-conv and token-shift inputs,
// KV cache) per layer and in total, beside the all-attention Transformer of the same preset, from
// the specs alone (model/cache_memory.h). `linac generate` measures the same caches.
#include "CacheReport.h"
#include "Commands.h"
#include "KernelLookup.h"

#include "eval/run_model.h"
#include "linac/Spec/SpecParser.h"
#include "model/cache_memory.h"

#include <iomanip>
#include <iostream>
#include <memory>

namespace linac::cli {
namespace {

constexpr int64_t kDefaultContext = 2048;

torch::ScalarType parseDtype(const std::string& name) {
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  if (name == "fp32") return torch::kFloat32;
  throw UsageError("--dtype must be bf16, fp16 or fp32, got '" + name + "'");
}


struct MemoryFlags {
  std::string spec;
  std::string schedule = "3:1";
  std::string preset = "tiny";
  int64_t context = kDefaultContext;
  int64_t batch = 1;
  std::string dtype = "bf16";
  std::string specsDir = LINAC_SOURCE_DIR "/specs";
  bool json = false;
};

int runMemory(const MemoryFlags& f) {
  const int64_t context = f.context, batch = f.batch;
  if (context < 1 || batch < 1) throw UsageError("--context and --batch must be >= 1");
  const std::string& dtypeName = f.dtype;
  const torch::ScalarType dtype = parseDtype(dtypeName);

  eval::RunInputs in;
  in.spec = f.spec;
  in.attention = f.specsDir + "/attention.yaml";
  in.presetDir = f.specsDir + "/presets";
  in.schedule = f.schedule;
  in.preset = f.preset;
  const model::ModelConfig hybrid = eval::describeRun(in, 0).config;
  if (hybrid.linear.kind != spec::VariantKind::Linear)
    throw UsageError(in.spec + " is not a linear variant spec; full attention comes from --schedule");
  requireKernels(hybrid.linear, in.spec);  // the layers' description (compiled on demand when not in generated/)
  model::ModelConfig transformer = hybrid;
  transformer.schedule = spec::loadSchedule("transformer");

  const model::CacheMemory h = model::cacheMemory(hybrid, batch, context, dtype);
  const model::CacheMemory t = model::cacheMemory(transformer, batch, context, dtype);
  const double share = double(h.total.total()) / double(t.total.total());
  if (f.json) {
    nlohmann::ordered_json j = {{"spec", hybrid.linear.name}, {"schedule", hybrid.schedule.text},
                                {"preset", hybrid.preset.name}, {"batch", batch}, {"context", context},
                                {"dtype", dtypeName}, {"layers", nlohmann::ordered_json::array()}};
    for (const auto& l : h.layers) {
      nlohmann::ordered_json row = {{"layer", l.layer}, {"mixer", l.name}};
      row.update(bytesJson(l.bytes));
      j["layers"].push_back(row);
    }
    j["total"] = bytesJson(h.total);
    j["transformer"] = bytesJson(t.total);
    j["share_of_transformer"] = share;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "linac memory: " << hybrid.linear.name << " " << hybrid.schedule.text << " " << hybrid.preset.name
            << ", batch " << batch << ", context " << context << ", " << dtypeName
            << " (recurrent states fp32)\n";
  printCacheTable(std::cout, h);
  std::cout << "transformer (" << hybrid.attention.name << " at all " << hybrid.preset.layers
            << " layers): kv cache " << formatBytes(t.total.kv) << ", total " << formatBytes(t.total.total()) << "\n"
            << std::fixed << std::setprecision(3) << "hybrid / transformer: " << share << " ("
            << h.total.total() << " / " << t.total.total() << " bytes)\n";
  return 0;
}

}  // namespace

Command addMemoryCommand(CLI::App& root) {
  auto f = std::make_shared<MemoryFlags>();
  CLI::App* app = root.add_subcommand("memory", "bytes of the inference caches per layer, beside the "
                                                "all-attention model's (from the specs alone)");
  app->add_option("SPEC", f->spec, "the linear variant spec (YAML)")->required();
  app->add_option("--schedule", f->schedule, "where full attention goes: 3:1, pure, transformer or a file")
      ->capture_default_str();
  app->add_option("--preset", f->preset, "the model size: a preset of specs/presets (tiny, small, 340m, 1.3b, mqar) or a preset file")->capture_default_str();
  app->add_option("--context", f->context, "tokens the caches hold")->capture_default_str();
  app->add_option("--batch", f->batch, "sequences")->capture_default_str();
  app->add_option("--dtype", f->dtype, "the caches' dtype: bf16, fp16 or fp32 (recurrent states stay fp32)")
      ->capture_default_str();
  app->add_option("--specs-dir", f->specsDir, "where presets/ and attention.yaml are found")->capture_default_str();
  app->add_flag("--json", f->json, "print the table as JSON");
  return {app, [f](const std::vector<std::string>&) { return runMemory(*f); }};
}

}  // namespace linac::cli
