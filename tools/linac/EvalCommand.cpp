// `linac eval RUN_DIR|CHECKPOINT --tasks ppl,mqar`: held-out perplexity and MQAR recall of a model
// that `linac train` wrote. The model is rebuilt from the run directory's model.json and the
// copies of its inputs (eval/run_model.h), not from the original spec files; a run directory
// evaluates its newest intact checkpoint (a damaged one is skipped, saying so), a named
// checkpoint must be intact.
#include "Args.h"
#include "Commands.h"
#include "KernelLookup.h"

#include "data/data.h"
#include "eval/eval.h"
#include "eval/run_model.h"
#include "model/model.h"
#include "trainer/trainer.h"

#include <torch/torch.h>

#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <sstream>
#include <sys/stat.h>

namespace linac::cli {
namespace {

constexpr int64_t kEvalBatch = 8;

std::vector<int64_t> parseList(const std::string& text, const std::string& flag) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    try {
      out.push_back(std::stoll(part));
    } catch (const std::exception&) {
      throw UsageError("--" + flag + ": '" + part + "' is not an integer");
    }
  }
  return out;
}

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

int runEval(int argc, char** argv) {
  Args args = parseArgs(argc, argv, 2, {"tasks", "data", "device", "mqar-pairs", "examples", "seed"}, {});
  if (args.positional.size() != 1) throw UsageError("expected exactly one CHECKPOINT (a ckpt-*.pt file or a run directory)");
  std::string ckpt = args.positional[0];
  std::string dir = ckpt;
  if (isDirectory(ckpt)) {
    ckpt = trainer::latestIntactCheckpoint(dir, &std::cerr);
  } else {
    dir = ckpt.substr(0, ckpt.find_last_of('/') == std::string::npos ? 0 : ckpt.find_last_of('/'));
    if (dir.empty()) dir = ".";
  }
  const eval::RunModel run = eval::loadRunModel(dir);
  const model::ModelConfig& mc = run.config;
  requireKernels(mc.linear, run.inputs.spec);
  std::ifstream configFile(dir + "/config.json");
  if (!configFile)
    throw UsageError("cannot read " + dir + "/config.json (written by `linac train` in its run directory)");
  const int64_t seqLen =
      trainer::configFromJson(std::string(std::istreambuf_iterator<char>(configFile), std::istreambuf_iterator<char>()))
          .seqLen;
  const std::string tok = run.inputs.tokenizer;

  const std::string device = args.get("device", torch::cuda::is_available() ? "cuda" : "cpu");
  const torch::Device dev = device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  model::HybridLM lm(mc);
  lm->to(dev);
  const int64_t step = trainer::loadModelWeights(ckpt, *lm, dev);
  lm->eval();
  auto forward = [&](const torch::Tensor& tokens) { return lm->forward(tokens); };
  std::cout << "linac eval " << ckpt << " (" << mc.linear.name << " " << mc.schedule.text << " " << mc.preset.name
            << ", step " << step << ", " << device << ")\n" << std::fixed << std::setprecision(4);

  for (const std::string& task : [&] {
         std::vector<std::string> t;
         std::stringstream ss(args.get("tasks", "ppl,mqar"));
         std::string one;
         while (std::getline(ss, one, ',')) t.push_back(one);
         return t;
       }()) {
    if (task == "ppl") {
      if (tok == "none")
        throw UsageError("--tasks ppl: " + dir + "/model.json describes a model trained with --task mqar (no "
                         "tokenizer, no corpus); use --tasks mqar");
      auto tokenizer = tok == "byte" ? data::makeByteTokenizer() : data::makeSentencePieceTokenizer(tok);
      data::Corpus corpus = args.has("data") ? data::loadCorpus(args.get("data", ""), *tokenizer)
                                             : data::defaultCorpus(*tokenizer);
      const int64_t n = corpus.heldOut.empty() ? 0 : (int64_t(corpus.heldOut.size()) - 1) / seqLen;
      torch::Tensor windows = torch::empty({n, seqLen + 1}, torch::kInt64);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t t = 0; t <= seqLen; ++t) windows[i][t] = corpus.heldOut[size_t(i * seqLen + t)];
      auto r = eval::perplexity(forward, windows, kEvalBatch, dev);
      std::cout << "ppl: held-out loss " << r.loss << " nats, perplexity " << r.ppl << " over " << r.tokens
                << " tokens (" << corpus.description << ")\n";
    } else if (task == "mqar") {
      auto pairs = parseList(args.get("mqar-pairs", "2,4,8"), "mqar-pairs");
      for (const auto& r : eval::mqar(forward, pairs, seqLen, mc.preset.vocab, args.getInt("examples", 64),
                                      static_cast<uint64_t>(args.getInt("seed", 1)), dev))
        std::cout << "mqar: " << r.pairs << " pairs, accuracy " << r.accuracy << " over " << r.queries << " queries\n";
    } else {
      throw UsageError("unknown task '" + task + "'; valid: ppl, mqar");
    }
  }
  return 0;
}

}  // namespace linac::cli
