// `linac memory SPEC --schedule S --preset P --context L [--batch B] [--dtype bf16] [--json]`: the
// bytes of a hybrid model's inference caches (recurrent state, short-conv and token-shift inputs,
// KV cache) per layer and in total, beside the all-attention Transformer of the same preset, from
// the specs alone (model/cache_memory.h). `linac generate` measures the same caches.
#include "Args.h"
#include "CacheReport.h"
#include "Commands.h"
#include "KernelLookup.h"

#include "eval/run_model.h"
#include "linac/Spec/SpecParser.h"
#include "model/cache_memory.h"

#include <iomanip>
#include <iostream>

namespace linac::cli {
namespace {

constexpr int64_t kDefaultContext = 2048;

torch::ScalarType parseDtype(const std::string& name) {
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  if (name == "fp32") return torch::kFloat32;
  throw UsageError("--dtype must be bf16, fp16 or fp32, got '" + name + "'");
}

}  // namespace

int runMemory(int argc, char** argv) {
  Args args = parseArgs(argc, argv, 2, {"schedule", "preset", "context", "batch", "dtype", "specs-dir"}, {"json"});
  if (args.positional.size() != 1) throw UsageError("expected exactly one SPEC file (the linear variant)");
  const int64_t context = args.getInt("context", kDefaultContext), batch = args.getInt("batch", 1);
  if (context < 1 || batch < 1) throw UsageError("--context and --batch must be >= 1");
  const std::string dtypeName = args.get("dtype", "bf16");
  const torch::ScalarType dtype = parseDtype(dtypeName);
  const std::string specsDir = args.get("specs-dir", LINAC_SOURCE_DIR "/specs");

  eval::RunInputs in;
  in.spec = args.positional[0];
  in.attention = specsDir + "/attention.yaml";
  in.presetDir = specsDir + "/presets";
  in.schedule = args.get("schedule", "3:1");
  in.preset = args.get("preset", "tiny");
  const model::ModelConfig hybrid = eval::describeRun(in, 0).config;
  if (hybrid.linear.kind != spec::VariantKind::Linear)
    throw UsageError(in.spec + " is not a linear variant spec; full attention comes from --schedule");
  requireKernels(hybrid.linear, in.spec);  // the layers' description (compiled on demand when not in generated/)
  model::ModelConfig transformer = hybrid;
  transformer.schedule = spec::loadSchedule("transformer");

  const model::CacheMemory h = model::cacheMemory(hybrid, batch, context, dtype);
  const model::CacheMemory t = model::cacheMemory(transformer, batch, context, dtype);
  const double share = double(h.total.total()) / double(t.total.total());
  if (args.has("json")) {
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

}  // namespace linac::cli
