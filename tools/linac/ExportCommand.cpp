// `linac export RUN_DIR|CHECKPOINT --out HF_DIR [--dtype fp32|bf16|fp16]`: a linac run as an fla
// checkpoint folder (config.json in fla's format + model.safetensors with fla's parameter
// names) that fla's AutoModelForCausalLM.from_pretrained loads; a SentencePiece tokenizer of the
// run is copied as tokenizer.model. A spec no fla model expresses is refused, naming why
// (runtime/interop/fla_checkpoint.h).
#include "Args.h"
#include "Commands.h"
#include "KernelLookup.h"
#include "RunCheckpoint.h"

#include "eval/run_model.h"
#include "interop/fla_checkpoint.h"
#include "model/model.h"
#include "trainer/file_io.h"
#include "trainer/trainer.h"

#include <iostream>

namespace linac::cli {

int runExport(int argc, char** argv) {
  Args args = parseArgs(argc, argv, 2, {"out", "dtype"}, {});
  if (args.positional.size() != 1) throw UsageError("expected exactly one RUN (a run directory or a ckpt-*.pt file)");
  const std::string outDir = args.get("out", "");
  if (outDir.empty()) throw UsageError("give --out HF_DIR: the folder to write config.json and model.safetensors to");
  const std::string dtypeName = args.get("dtype", "fp32");
  const torch::ScalarType dtype = dtypeName == "fp32" ? torch::kFloat32
                                  : dtypeName == "bf16" ? torch::kBFloat16
                                  : dtypeName == "fp16" ? torch::kFloat16
                                                        : throw UsageError("--dtype must be fp32, bf16 or fp16");
  const RunCheckpoint found = resolveCheckpoint(args.positional[0], std::cerr);
  const eval::RunModel run = eval::loadRunModel(found.dir);
  requireKernels(run.config.linear, run.inputs.spec);
  model::HybridLM lm(run.config);
  const int64_t step = trainer::loadModelWeights(found.ckpt, *lm, torch::kCPU);
  try {
    interop::exportFlaCheckpoint(run.config, *lm, outDir, dtype);
  } catch (const interop::Unsupported& e) {
    throw UsageError(std::string("cannot export ") + found.dir + " to fla: " + e.what());
  }
  const std::string tok = run.inputs.tokenizer;
  if (tok != "byte" && tok != "none") {
    const auto bytes = trainer::detail::readFileIfExists(tok);
    if (!bytes) throw UsageError("cannot read the run's tokenizer " + tok);
    trainer::detail::writeFileAtomically(outDir + "/tokenizer.model", *bytes);
  }
  std::cout << "linac export: " << found.ckpt << " (step " << step << ", " << run.config.linear.name << " "
            << run.config.schedule.text << ") -> " << outDir << "/config.json, model.safetensors (" << dtypeName << ")\n";
  if (tok == "byte")
    std::cout << "  the run's tokenizer is linac's byte-level one (ids = bytes); fla gets no tokenizer files\n";
  return 0;
}

}  // namespace linac::cli
