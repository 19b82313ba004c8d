// `linac import FLA_DIR --out RUN_DIR`: an fla / Hugging Face checkpoint (config.json +
// safetensors, as fla's save_pretrained writes it) as a linac run directory that `linac eval`
// and `linac generate` accept: model.json and inputs/ (the linac spec the fla model_type maps
// to, the attention spec, a preset with the checkpoint's sizes, the tokenizer), config.json and
// the weights as checkpoint 0. A config the spec cannot express is refused, naming the field
// (runtime/interop/fla_checkpoint.h).
#include "Commands.h"
#include "KernelLookup.h"

#include "eval/run_model.h"
#include "interop/fla_checkpoint.h"
#include "interop/safetensors.h"
#include "model/model.h"
#include "trainer/file_io.h"
#include "trainer/trainer.h"

#include <iostream>

namespace linac::cli {
namespace {

namespace fs = trainer::detail;

/// The preset file of the imported sizes (parsed back by spec::loadPreset).
std::string presetYaml(const spec::PresetSpec& p, const std::string& source) {
  return "# The sizes of the fla checkpoint " + source + " (written by linac import).\n" +
         "name: " + p.name + "\nhidden: " + std::to_string(p.hidden) + "\nlayers: " + std::to_string(p.layers) +
         "\nvocab: " + std::to_string(p.vocab) + "\nattn_heads: " + std::to_string(p.attnHeads) +
         "\nintermediate: " + std::to_string(p.intermediate) + "\nmax_seq_len: " + std::to_string(p.maxSeqLen) +
         "\ntie_embeddings: " + (p.tieEmbeddings ? "true" : "false") + "\n";
}

struct ImportFlags {
  std::string flaDir;
  std::string out;
  std::string spec;
  std::string specsDir = LINAC_SOURCE_DIR "/specs";
  std::string tokenizer;  // empty: FLA_DIR/tokenizer.model
  int64_t seqLen = 0;     // 0: min(the checkpoint's max_seq_len, 2048)
};

int runImport(const ImportFlags& f) {
  const std::string& flaDir = f.flaDir;
  const std::string& outDir = f.out;
  if (fs::pathExists(outDir) && !fs::listDirectory(outDir).empty())
    throw UsageError(outDir + " is not empty; linac import writes a new run directory");
  const std::string& specsDir = f.specsDir;

  interop::FlaImport imported;
  try {
    imported = interop::importFlaCheckpoint(flaDir, f.spec, specsDir + "/attention.yaml", specsDir);
  } catch (const interop::Unsupported& e) {
    throw UsageError(flaDir + ": " + e.what());
  }
  const spec::PresetSpec& preset = imported.config.preset;

  eval::RunInputs in;
  if (!f.tokenizer.empty()) in.tokenizer = f.tokenizer;
  else if (fs::pathExists(flaDir + "/tokenizer.model")) in.tokenizer = flaDir + "/tokenizer.model";
  else
    throw UsageError(flaDir + " has no tokenizer.model (SentencePiece); give --tokenizer byte|none|FILE.model "
                     "(none: ids only, for --tasks mqar)");
  in.task = in.tokenizer == "none" ? "mqar" : "lm";
  if (in.tokenizer == "byte" && preset.vocab < 256)
    throw UsageError("--tokenizer byte needs a vocabulary of at least 256 ids; the checkpoint has " +
                     std::to_string(preset.vocab));
  in.spec = imported.config.linear.file;
  in.attention = specsDir + "/attention.yaml";
  in.schedule = imported.shape.schedule;
  in.presetDir = specsDir + "/presets";
  in.preset = outDir + "/inputs/preset.yaml";
  fs::makeDirectories(outDir + "/inputs");
  fs::writeFileAtomically(in.preset, presetYaml(preset, flaDir));
  const eval::RunModel run = eval::describeRun(in, 0);
  for (const auto& f : run.files) fs::writeFileAtomically(outDir + "/" + f.name, f.contents);

  trainer::TrainConfig tc;
  tc.steps = 0;
  tc.batch = 1;
  tc.seqLen = f.seqLen > 0 ? f.seqLen : std::min<int64_t>(preset.maxSeqLen, 2048);
  tc.outDir = outDir;
  tc.dataSource = "fla checkpoint " + flaDir;
  fs::writeFileAtomically(outDir + "/config.json", trainer::configToJson(tc) + "\n");

  requireKernels(run.config.linear, in.spec);
  model::HybridLM lm(run.config);
  interop::loadState(*lm, imported.state);
  const std::string ckpt = trainer::writeModelCheckpoint(outDir, tc, 0, *lm);
  std::cout << "linac import: " << flaDir << " (fla " << imported.shape.modelType << ") -> " << ckpt << "\n"
            << "  " << run.config.linear.name << ", schedule " << run.config.schedule.text << ", " << preset.layers
            << " layers, hidden " << preset.hidden << ", vocab " << preset.vocab << ", " << lm->parameterCount()
            << " parameters, tokenizer " << in.tokenizer << "\n";
  return 0;
}

}  // namespace

Command addImportCommand(CLI::App& root) {
  auto f = std::make_shared<ImportFlags>();
  CLI::App* app = root.add_subcommand("import", "an fla / Hugging Face checkpoint (config.json + safetensors) as a "
                                                "linac run directory that eval and generate accept");
  app->add_option("FLA_DIR", f->flaDir, "the checkpoint folder (config.json, model.safetensors or shards)")
      ->required();
  app->add_option("--out", f->out, "the run directory to create (new or empty)")->required();
  app->add_option("--spec", f->spec, "the linac spec to load into (default: the one fla's model_type maps to)");
  app->add_option("--tokenizer", f->tokenizer, "byte, none (ids only) or a SentencePiece .model")
      ->default_str("FLA_DIR/tokenizer.model");
  app->add_option("--seq-len", f->seqLen, "the run's sequence length")
      ->check(CLI::PositiveNumber)
      ->default_str("min(max_seq_len, 2048)");
  app->add_option("--specs-dir", f->specsDir, "where presets/ and attention.yaml are found")->capture_default_str();
  return {app, [f](const std::vector<std::string>&) { return runImport(*f); }};
}

}  // namespace linac::cli
