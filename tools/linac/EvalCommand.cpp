// `linac eval CHECKPOINT --tasks ppl,mqar`: held-out perplexity and MQAR recall of a model that
// `linac train` wrote. The model is rebuilt from model.json beside the checkpoint.
#include "Args.h"
#include "Commands.h"
#include "KernelLookup.h"

#include "data/data.h"
#include "eval/eval.h"
#include "linac/Spec/SpecParser.h"
#include "model/model.h"
#include "trainer/trainer.h"

#include <torch/torch.h>

#include <fstream>
#include <iomanip>
#include <iostream>
#include <regex>
#include <sstream>
#include <sys/stat.h>

namespace linac::cli {
namespace {

constexpr int64_t kEvalBatch = 8;

/// One string or integer field of the flat model.json that `linac train` writes.
std::string jsonField(const std::string& json, const std::string& key, const std::string& file) {
  std::smatch m;
  std::regex quoted("\"" + key + "\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"");
  std::regex number("\"" + key + "\"\\s*:\\s*(-?[0-9]+)");
  if (std::regex_search(json, m, quoted) || std::regex_search(json, m, number)) return m[1];
  throw UsageError(file + ": no \"" + key + "\" field");
}

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
  Args args = parseArgs(argc, argv, 2, {"tasks", "data", "device", "mqar-pairs", "examples", "specs-dir", "seed"}, {});
  if (args.positional.size() != 1) throw UsageError("expected exactly one CHECKPOINT (a ckpt-*.pt file or a run directory)");
  std::string ckpt = args.positional[0];
  std::string dir = ckpt;
  if (isDirectory(ckpt)) {
    std::ifstream latest(ckpt + "/latest");
    std::string name;
    if (!(latest >> name)) throw UsageError(ckpt + " has no 'latest' checkpoint");
    ckpt = ckpt + "/" + name;
  } else {
    dir = ckpt.substr(0, ckpt.find_last_of('/') == std::string::npos ? 0 : ckpt.find_last_of('/'));
    if (dir.empty()) dir = ".";
  }
  const std::string modelJsonPath = dir + "/model.json";
  std::ifstream mj(modelJsonPath);
  if (!mj) throw UsageError("cannot read " + modelJsonPath + " (written by `linac train` beside its checkpoints)");
  std::string json((std::istreambuf_iterator<char>(mj)), std::istreambuf_iterator<char>());

  const std::string specsDir = args.get("specs-dir", LINAC_SOURCE_DIR "/specs");
  model::ModelConfig mc;
  const std::string specPath = jsonField(json, "spec", modelJsonPath);
  mc.linear = spec::loadVariant(specPath);
  requireKernels(mc.linear, specPath);
  mc.attention = spec::loadVariant(specsDir + "/attention.yaml");
  mc.schedule = spec::loadSchedule(jsonField(json, "schedule", modelJsonPath));
  mc.preset = spec::loadPreset(jsonField(json, "preset", modelJsonPath), specsDir + "/presets");
  mc.preset.vocab = std::stoll(jsonField(json, "vocab", modelJsonPath));
  const int64_t seqLen = std::stoll(jsonField(json, "seq_len", modelJsonPath));
  const std::string tok = jsonField(json, "tokenizer", modelJsonPath);

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
        throw UsageError("--tasks ppl: " + modelJsonPath + " describes a model trained with --task mqar (no "
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
