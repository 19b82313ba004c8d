// `linac import FLA_DIR --out RUN_DIR`: an fla / Hugging Face checkpoint (config.json +
// safetensors, as fla's save_pretrained writes it) as a linac run directory that `linac eval`
// and `linac generate` accept: model.json and inputs/ (the linac spec the fla model_type maps
// to, the attention spec, a preset with the checkpoint's sizes, the tokenizer), config.json and
// the weights as checkpoint 0. A config the spec cannot express is refused, naming the field
// (runtime/interop/fla_checkpoint.h).
#include "Args.h"
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

}  // namespace

int runImport(int argc, char** argv) {
  Args args = parseArgs(argc, argv, 2, {"out", "spec", "specs-dir", "tokenizer", "seq-len"}, {});
  if (args.positional.size() != 1) throw UsageError("expected exactly one FLA_DIR (config.json + model.safetensors)");
  const std::string flaDir = args.positional[0];
  const std::string outDir = args.get("out", "");
  if (outDir.empty()) throw UsageError("give --out RUN_DIR: the run directory to create");
  if (fs::pathExists(outDir) && !fs::listDirectory(outDir).empty())
    throw UsageError(outDir + " is not empty; linac import writes a new run directory");
  const std::string specsDir = args.get("specs-dir", LINAC_SOURCE_DIR "/specs");

  interop::FlaImport imported;
  try {
    imported = interop::importFlaCheckpoint(flaDir, args.get("spec", ""), specsDir + "/attention.yaml", specsDir);
  } catch (const interop::Unsupported& e) {
    throw UsageError(flaDir + ": " + e.what());
  }
  const spec::PresetSpec& preset = imported.config.preset;

  eval::RunInputs in;
  if (args.has("tokenizer")) in.tokenizer = args.get("tokenizer", "byte");
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
  tc.seqLen = args.getInt("seq-len", std::min<int64_t>(preset.maxSeqLen, 2048));
  if (tc.seqLen < 1) throw UsageError("--seq-len must be >= 1");
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

}  // namespace linac::cli
