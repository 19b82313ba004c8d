// `linac eval RUN_DIR|CHECKPOINT --tasks ppl,mqar,ruler,arc_easy,...`: held-out perplexity, MQAR
// recall, RULER's synthetic tasks and zero-shot task files (EvalTasks.h) of a model that `linac
// train` wrote. The model is rebuilt from the run directory's model.json and the copies of its
// inputs (eval/run_model.h), not from the original spec files; a run directory evaluates its
// newest intact checkpoint (a damaged one is skipped, saying so), a named checkpoint must be
// intact. Every result is also appended, as one JSON line, to the run directory's eval.jsonl.
#include "Commands.h"
#include "EvalTasks.h"
#include "KernelLookup.h"
#include "RunCheckpoint.h"
#include "YamlConfig.h"

#include "data/data.h"
#include "data/token_shards.h"
#include "eval/eval.h"
#include "eval/run_model.h"
#include "model/model.h"
#include "tasks/cached_model.h"
#include "tasks/report.h"
#include "trainer/trainer.h"

#include <torch/torch.h>

#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>

namespace linac::cli {
namespace {

constexpr int64_t kEvalBatch = 8;

struct EvalFlags {
  std::string run;
  std::string tasks = "ppl,mqar";
  std::string data;
  std::string device = "auto";
  std::vector<int64_t> mqarPairs = {2, 4, 8};
  std::string haystack;
  bool varlen = false;
  TaskSettings settings;
};

int runEval(EvalFlags& f) {
  TaskPlan plan;
  try {
    plan = planTasks(splitList(f.tasks, ',', "--tasks"), f.settings.taskDir);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const TaskSettings& settings = f.settings;
  if (settings.examples < 1 || settings.batch < 1 || settings.limit < 0)
    throw UsageError("--examples and --batch must be >= 1, --limit >= 0");
  if (settings.contexts.empty()) throw UsageError("--context needs at least one length");
  for (int64_t c : settings.contexts)
    if (c < 1) throw UsageError("--context: " + std::to_string(c) + " is not a positive length");
  if (f.mqarPairs.empty()) throw UsageError("--mqar-pairs needs at least one number of pairs");
  for (int64_t p : f.mqarPairs)
    if (p < 1) throw UsageError("--mqar-pairs: " + std::to_string(p) + " is not a positive number of pairs");
  const std::string device = resolveDevice(f.device, torch::cuda::is_available());
  const RunCheckpoint found = resolveCheckpoint(f.run, std::cerr);
  const std::string& ckpt = found.ckpt;
  const std::string& dir = found.dir;
  const eval::RunModel run = eval::loadRunModel(dir);
  const model::ModelConfig& mc = run.config;
  requireKernels(mc.linear, run.inputs.spec);
  std::ifstream configFile(dir + "/config.json");
  if (!configFile)
    throw UsageError("cannot read " + dir + "/config.json (written by `linac train` in its run directory)");
  const trainer::TrainConfig trained =
      trainer::configFromJson(std::string(std::istreambuf_iterator<char>(configFile), std::istreambuf_iterator<char>()));
  const int64_t seqLen = trained.seqLen;
  const std::string tok = run.inputs.tokenizer;

  const torch::Device dev = device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  model::HybridLM lm(mc);
  lm->to(dev);
  const int64_t step = trainer::loadModelWeights(ckpt, *lm, dev);
  lm->eval();
  auto forward = [&](const torch::Tensor& tokens) { return lm->forward(tokens); };
  std::cout << "linac eval " << ckpt << " (" << mc.linear.name << " " << mc.schedule.text << " " << mc.preset.name
            << ", step " << step << ", " << device << ")\n" << std::fixed << std::setprecision(4);

  std::vector<nlohmann::ordered_json> lines;
  if (plan.ppl) {
    if (tok == "none")
      throw UsageError("--tasks ppl: " + dir + "/model.json describes a model trained with --task mqar (no "
                       "tokenizer, no corpus); use --tasks mqar");
    auto tokenizer = tok == "byte" ? data::makeByteTokenizer() : data::makeSentencePieceTokenizer(tok);
    // The held-out part training used: whole documents at the end of token shards (mapped, the
    // tail read), else the corpus's held-out documents.
    const std::string& dataPath = f.data;
    std::vector<int64_t> heldOut;
    std::string description;
    // The id that ends a document (--varlen): the tokenizer's, or the shards' own where they
    // record one.
    std::optional<int64_t> separator = tokenizer->documentSeparator();
    if (!dataPath.empty() && data::isTokenShardPath(dataPath)) {
      const auto shards = data::TokenShards::open(dataPath);
      separator = shards->documentSeparator();
      if (shards->vocabSize() != mc.preset.vocab)
        throw data::DataError(shards->description() + ": ids of a " + std::to_string(shards->vocabSize()) +
                              "-entry vocabulary, but the model's is " + std::to_string(mc.preset.vocab));
      const int64_t start = data::shardHeldOutStart(*shards, seqLen + 1);
      heldOut.resize(size_t(shards->tokens() - start));
      shards->read(start, int64_t(heldOut.size()), heldOut.data());
      description = shards->description();
    } else {
      data::Corpus corpus = dataPath.empty() ? data::defaultCorpus(*tokenizer) : data::loadCorpus(dataPath, *tokenizer);
      heldOut = std::move(corpus.heldOut);
      description = corpus.description;
    }
    const int64_t n = heldOut.empty() ? 0 : (int64_t(heldOut.size()) - 1) / seqLen;
    torch::Tensor windows = torch::empty({n, seqLen + 1}, torch::kInt64);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t t = 0; t <= seqLen; ++t) windows[i][t] = heldOut[size_t(i * seqLen + t)];
    // Documents apart with --varlen, or where the run trained so (its config.yaml).
    const bool varlen = f.varlen || configValue(dir + "/config.yaml", "varlen") == "true";
    if (varlen && !separator) throw UsageError("--varlen: " + dataPath + " records no document separator");
    auto documentsForward = [&](const torch::Tensor& tokens) {
      const model::Documents documents = model::documentsEndingWith(tokens, *separator);
      return lm->forward(tokens, &documents);
    };
    auto r = varlen ? eval::perplexity(documentsForward, windows, kEvalBatch, dev)
                    : eval::perplexity(forward, windows, kEvalBatch, dev);
    std::cout << "ppl: held-out loss " << r.loss << " nats, perplexity " << r.ppl << " over " << r.tokens
              << " tokens (" << description
              << (varlen ? f.varlen ? "; documents apart" : "; documents apart, as the run trained" : "") << ")\n";
    lines.push_back({{"task", "ppl"}, {"loss", r.loss}, {"ppl", r.ppl}, {"tokens", r.tokens}, {"varlen", varlen}});
  }
  if (plan.mqar) {
    for (const auto& r : eval::mqar(forward, f.mqarPairs, seqLen, mc.preset.vocab, settings.examples, settings.seed, dev)) {
      std::cout << "mqar: " << r.pairs << " pairs, accuracy " << r.accuracy << " over " << r.queries << " queries\n";
      lines.push_back({{"task", "mqar"}, {"pairs", r.pairs}, {"accuracy", r.accuracy}, {"queries", r.queries}});
    }
  }
  if (!plan.ruler.empty() || !plan.zeroShot.empty()) {
    if (tok == "none")
      throw UsageError("--tasks: RULER and zero-shot tasks need text, and " + dir + "/model.json describes a model "
                       "trained with --task mqar (no tokenizer); use --tasks mqar");
    auto tokenizer = tok == "byte" ? data::makeByteTokenizer() : data::makeSentencePieceTokenizer(tok);
    tasks::FullForwardOptions options;
    options.batch = settings.batch;
    options.maxLength = mc.preset.maxSeqLen;  // zero-shot inputs are cut to it from the left, as lm-eval does
    auto model = tasks::makeCachedModel(*lm, dev, options);  // prefill once, then decode steps
    const std::vector<std::string> haystack =
        plan.ruler.empty() ? std::vector<std::string>{} : haystackWords(f.haystack, trained.dataSource, *tokenizer);
    for (auto& line : runTasks(plan, settings, *model, *tokenizer, haystack)) lines.push_back(std::move(line));
  }
  for (auto& line : lines) {
    line["checkpoint"] = found.fileName();
    line["step"] = step;
  }
  tasks::appendJsonLines(dir + "/eval.jsonl", lines);
  std::cout << "results appended to " << dir << "/eval.jsonl\n";
  return 0;
}

}  // namespace

Command addEvalCommand(CLI::App& root) {
  auto f = std::make_shared<EvalFlags>();
  TaskSettings& s = f->settings;
  s.contexts = {1024, 2048, 4096};
  s.examples = 64;
  s.seed = 1;
  s.batch = kEvalBatch;
  CLI::App* app = root.add_subcommand("eval", "perplexity, MQAR recall, RULER and zero-shot tasks of a model "
                                              "`linac train` wrote (results appended to the run's eval.jsonl)");
  app->add_option("CHECKPOINT", f->run, "a run directory (its newest intact checkpoint) or a ckpt-*.pt file")
      ->required();
  app->add_option("--tasks", f->tasks,
                  "comma-separated: ppl, mqar, ruler (or ruler_niah_single, ...), arc_easy, hellaswag, ... "
                  "(zero-shot task files in --task-dir)")
      ->capture_default_str();
  app->add_option("--data", f->data, "the corpus whose held-out part ppl scores (default: the embedded corpus)");
  app->add_flag("--varlen", f->varlen,
                "ppl: score the documents of each held-out window apart (the default for a run trained with --varlen)");
  addDeviceOption(*app, f->device);
  addIntListOption(*app, "--mqar-pairs", f->mqarPairs, "comma-separated key-value pairs per MQAR sequence");
  addIntListOption(*app, "--context", s.contexts, "comma-separated RULER context lengths in tokens");
  app->add_option("--examples", s.examples, "examples per MQAR setting and per RULER task and context")
      ->capture_default_str();
  app->add_option("--seed", s.seed, "the seed of the synthetic tasks' examples")->capture_default_str();
  app->add_option("--task-dir", s.taskDir, "the folder of zero-shot task files (arc_easy.jsonl, ...)");
  app->add_option("--haystack", f->haystack, "a text file for RULER's haystacks (default: the training data)");
  app->add_option("--limit", s.limit, "zero-shot documents per task; 0 = all")->capture_default_str();
  app->add_option("--batch", s.batch, "sequences per forward pass of the zero-shot and RULER tasks")
      ->capture_default_str();
  return {app, [f](const std::vector<std::string>&) { return runEval(*f); }};
}

}  // namespace linac::cli
