// `linac export RUN_DIR|CHECKPOINT --out HF_DIR [--dtype fp32|bf16|fp16]`: a linac run as an fla
// checkpoint folder (config.json in fla's format + model.safetensors with fla's parameter
// names) that fla's AutoModelForCausalLM.from_pretrained loads; a SentencePiece tokenizer of the
// run is copied as tokenizer.model. A spec no fla model expresses is refused, naming why
// (runtime/interop/fla_checkpoint.h).
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
namespace {

struct ExportFlags {
  std::string run;
  std::string out;
  std::string dtype = "fp32";
};

int runExport(const ExportFlags& f) {
  const std::string& outDir = f.out;
  const std::string& dtypeName = f.dtype;
  const torch::ScalarType dtype = dtypeName == "bf16" ? torch::kBFloat16
                                  : dtypeName == "fp16" ? torch::kFloat16
                                                        : torch::kFloat32;
  const RunCheckpoint found = resolveCheckpoint(f.run, std::cerr);
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

}  // namespace

Command addExportCommand(CLI::App& root) {
  auto f = std::make_shared<ExportFlags>();
  CLI::App* app = root.add_subcommand("export", "a linac run as an fla checkpoint folder (config.json + "
                                                "model.safetensors with fla's parameter names)");
  app->add_option("RUN", f->run, "a run directory or a ckpt-*.pt file")->required();
  app->add_option("--out", f->out, "the folder to write config.json and model.safetensors to")->required();
  app->add_option("--dtype", f->dtype, "the tensors' dtype in model.safetensors")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  return {app, [f](const std::vector<std::string>&) { return runExport(*f); }};
}

}  // namespace linac::cli
