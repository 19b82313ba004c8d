// `linac generate RUN_DIR|CHECKPOINT --prompt TEXT [--prompt TEXT ...]`: continue prompts with a
// trained model through its state caches (generate/generator.h): each prompt once through the
// chunk kernels, then one decode step per new token, for --batch copies of every prompt at once
// (prompts of different lengths in one batch, each at its own position). Prints each continuation,
// prefill and decode throughput, and the cache's bytes as held beside `linac memory`'s arithmetic
// (and, on CUDA, the caching allocator's bytes for the cache and its peak).
#include "CacheReport.h"
#include "Commands.h"
#include "KernelLookup.h"
#include "RunCheckpoint.h"

#include "data/data.h"
#include "eval/run_model.h"
#include "generate/generator.h"
#include "model/cache_memory.h"
#include "model/model.h"
#include "trainer/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>

namespace linac::cli {
namespace {

constexpr int64_t kDefaultMaxNew = 64;

struct GenerateFlags {
  std::string run;
  std::vector<std::string> prompts;
  int64_t batch = 1;
  std::string device = "auto";
  generate::GenerateOptions options;
};

int runGenerate(GenerateFlags& f) {
  generate::GenerateOptions& options = f.options;
  const int64_t batch = f.batch;
  if (options.maxNew < 1 || batch < 1) throw UsageError("--max-new and --batch must be >= 1");
  try {
    generate::checkSampling(options.sampling);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string(e.what()) + " (--temperature, --top-p)");
  }
  const std::string device = resolveDevice(f.device, torch::cuda::is_available());

  const RunCheckpoint found = resolveCheckpoint(f.run, std::cerr);
  const eval::RunModel run = eval::loadRunModel(found.dir);
  const model::ModelConfig& mc = run.config;
  requireKernels(mc.linear, run.inputs.spec);
  const std::string tok = run.inputs.tokenizer;
  if (tok == "none")
    throw UsageError(found.dir + "/model.json describes a model trained with --task mqar (ids, no tokenizer): it "
                     "has no text to continue");
  auto tokenizer = tok == "byte" ? data::makeByteTokenizer() : data::makeSentencePieceTokenizer(tok);

  // As evaluation does, the model sees the end-of-document id first, and a continuation ends
  // when it produces that id. Rows: --batch copies of each prompt, in order.
  std::vector<std::vector<int64_t>> rows;
  std::vector<size_t> rowPrompt;  // the prompt each row continues
  int64_t longest = 0, promptTokens = 0;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    std::vector<int64_t> ids = {tokenizer->documentSeparator()};
    for (int64_t id : tokenizer->encode(f.prompts[i])) ids.push_back(id);
    longest = std::max(longest, int64_t(ids.size()));
    for (int64_t b = 0; b < batch; ++b) rows.push_back(ids), rowPrompt.push_back(i), promptTokens += int64_t(ids.size());
  }
  options.stop = tokenizer->documentSeparator();
  if (longest + options.maxNew > mc.preset.maxSeqLen)
    std::cerr << "note: " << longest + options.maxNew << " tokens exceed the preset's max_seq_len "
              << mc.preset.maxSeqLen << " (the model was not trained that long)\n";
  const int64_t R = int64_t(rows.size());

  const torch::Device dev = device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  model::HybridLM lm(mc);
  lm->to(dev);
  const int64_t step = trainer::loadModelWeights(found.ckpt, *lm, dev);
  lm->eval();
  std::cout << "linac generate " << found.ckpt << " (" << mc.linear.name << " " << mc.schedule.text << " "
            << mc.preset.name << ", step " << step << ", " << device << ")\n";

  const generate::GenerateResult r = generate::generate(*lm, rows, dev, options);

  for (int64_t b = 0; b < R; ++b) {
    if (R > 1) std::cout << "--- sequence " << b << " ---\n";
    std::cout << f.prompts[rowPrompt[size_t(b)]] << tokenizer->decode(r.tokens[size_t(b)]) << "\n";
  }
  std::cout << "---\n" << std::fixed << std::setprecision(1);
  std::cout << "prefill: " << R << " sequences, " << promptTokens << " tokens in " << std::setprecision(4)
            << r.prefillSeconds << " s, " << std::setprecision(1) << r.prefillTokensPerSecond() << " tokens/s\n";
  std::cout << "decode: " << R << " x " << r.decodeTokens / R << " steps in " << std::setprecision(4)
            << r.decodeSeconds << " s, " << std::setprecision(1) << r.decodeTokensPerSecond() << " tokens/s\n";
  const model::CacheMemory expected =
      model::cacheMemory(mc, R, r.capacity, lm->parameters().front().scalar_type());
  const bool equal = expected.total.total() == r.cacheBytes.total();
  std::cout << "cache: " << r.cacheBytes.total() << " bytes held (" << formatBytes(r.cacheBytes.total())
            << ": state " << formatBytes(r.cacheBytes.state) << ", conv " << formatBytes(r.cacheBytes.conv)
            << ", shift " << formatBytes(r.cacheBytes.shift) << ", kv " << formatBytes(r.cacheBytes.kv) << ") for "
            << R << " x " << r.capacity << " positions; linac memory's arithmetic: " << expected.total.total()
            << " bytes (" << (equal ? "equal" : "DIFFERENT") << ")\n";
  if (r.device)
    std::cout << "cuda allocator: cache allocation " << r.device->cache << " bytes, peak " << r.device->peak
              << " bytes allocated (" << formatBytes(r.device->peak - r.device->before)
              << " above the " << formatBytes(r.device->before) << " allocated before generation)\n";
  if (!equal)
    std::cerr << "linac generate: error: the cache holds " << r.cacheBytes.total() << " bytes but cache_memory.h "
              << "computes " << expected.total.total() << " for it; `linac memory` misreports this model (a bug)\n";
  return equal ? 0 : 1;
}

}  // namespace

Command addGenerateCommand(CLI::App& root) {
  auto f = std::make_shared<GenerateFlags>();
  generate::GenerateOptions& o = f->options;
  o.maxNew = kDefaultMaxNew;
  CLI::App* app = root.add_subcommand("generate", "continue prompts through the model's state caches (prefill, "
                                                  "then decode steps); throughput and cache bytes");
  app->add_option("CHECKPOINT", f->run, "a run directory (its newest intact checkpoint) or a ckpt-*.pt file")
      ->required();
  app->add_option("--prompt", f->prompts, "a text to continue; repeat it for several prompts, generated together")
      ->required();
  app->add_option("--max-new", o.maxNew, "new tokens at most per sequence")->capture_default_str();
  app->add_option("--temperature", o.sampling.temperature, "sampling temperature; 0 = greedy")
      ->capture_default_str();
  app->add_option("--top-p", o.sampling.topP, "nucleus sampling: the smallest set of tokens with this probability")
      ->capture_default_str();
  app->add_option("--seed", o.sampling.seed, "the sampling seed")->capture_default_str();
  app->add_option("--batch", f->batch, "copies of each prompt continued at once")->capture_default_str();
  addDeviceOption(*app, f->device);
  return {app, [f](const std::vector<std::string>&) { return runGenerate(*f); }};
}

}  // namespace linac::cli
