// `linac train SPEC --schedule S --preset P [--task lm|mqar]`: build the hybrid model from the
// specs, train it on the given data (the embedded corpus by default) or on freshly generated MQAR
// sequences (--task mqar: loss on the answers only), then report held-out perplexity against the
// unigram baseline (lm) and MQAR recall.
#include "Args.h"
#include "Commands.h"
#include "KernelLookup.h"

#include "data/data.h"
#include "eval/eval.h"
#include "linac/Spec/SpecParser.h"
#include "model/model.h"
#include "trainer/trainer.h"
#ifdef LINAC_HAVE_DISTRIBUTED  // data parallel (runtime/distributed): --nproc, torchrun env
#include "distributed/distributed.h"
#include "distributed/grad_reducer.h"
#endif

#include <torch/torch.h>

#include <climits>
#include <memory>
#include <optional>
#include <cstdlib>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <regex>

namespace linac::cli {
namespace {

/// Defaults sized for the tiny preset on a laptop CPU: a few minutes, loss visibly falling.
constexpr int64_t kDefaultSteps = 300;
constexpr int64_t kDefaultBatch = 8;
constexpr int64_t kDefaultSeqLen = 128;
constexpr double kDefaultLr = 2e-3;
constexpr int64_t kMqarExamples = 64;
const std::vector<int64_t> kMqarPairs = {2, 4, 8};
/// --task mqar: 4 pairs (8 context tokens, 12 query slots) per 32 tokens, 32 sequences a step
/// (the LM defaults' 1024 tokens a step; 128 answers).
constexpr int64_t kDefaultMqarPairs = 4;
constexpr int64_t kDefaultMqarSeqLen = 32;
constexpr int64_t kDefaultMqarBatch = 32;
constexpr int64_t kMqarHeldOut = 256;  // fixed held-out MQAR sequences scored at each evaluation

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

/// [N, seqLen + 1] windows over the held-out tokens (non-overlapping), for evaluation.
torch::Tensor heldOutWindows(const std::vector<int64_t>& tokens, int64_t seqLen) {
  const int64_t n = tokens.empty() ? 0 : (int64_t(tokens.size()) - 1) / seqLen;
  torch::Tensor out = torch::empty({n, seqLen + 1}, torch::kInt64);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t <= seqLen; ++t) out[i][t] = tokens[size_t(i * seqLen + t)];
  return out;
}

/// realpath(3), not std::filesystem::absolute: the PyPI libtorch linked into `linac` exports an
/// ABI-incompatible copy of several std::filesystem functions.
std::string absolutePath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

}  // namespace

int runTrain(int argc, char** argv) {
  Args args = parseArgs(argc, argv, 2,
                        {"schedule", "preset", "data", "tokenizer", "steps", "batch", "seq-len", "accumulation",
                         "lr", "warmup", "out", "device", "seed", "eval-every", "log-every", "checkpoint-every",
                         "specs-dir", "nproc", "task", "mqar-pairs"},
                        {"resume", "no-overlap"});
  // Data parallel: `--nproc N` re-runs this command as N local ranks (each sees WORLD_SIZE and
  // becomes a worker below); a torchrun-style environment (WORLD_SIZE set) makes this a worker.
  const int64_t nproc = args.getInt("nproc", 1);
  if (nproc < 1) throw UsageError("--nproc must be >= 1");
#ifdef LINAC_HAVE_DISTRIBUTED
  if (nproc > 1 && !distributed::launchedDistributed()) {
    std::cout << "linac train: launching " << nproc << " local ranks (Gloo on CPU, NCCL on CUDA)" << std::endl;
    const int rc = distributed::launchLocalWorkers(int(nproc), std::vector<std::string>(argv, argv + argc));
    if (rc != 0) std::cerr << "linac train: a rank failed (exit code " << rc << ")\n";
    return rc;
  }
  std::optional<distributed::DistContext> dist;
#else
  if (nproc > 1 || std::getenv("WORLD_SIZE"))
    throw UsageError("this build has no distributed training (install libgloo-dev and reconfigure)");
#endif
  if (args.positional.size() != 1) throw UsageError("expected exactly one SPEC file");
  const std::string specPath = args.positional[0];
  const std::string specsDir = args.get("specs-dir", LINAC_SOURCE_DIR "/specs");

  model::ModelConfig mc;
  mc.linear = spec::loadVariant(specPath);
  if (mc.linear.kind != spec::VariantKind::Linear)
    throw UsageError("train takes a linear variant spec; full attention comes from the schedule "
                     "(use --schedule transformer for an all-attention model)");
  requireKernels(mc.linear, specPath);
  mc.attention = spec::loadVariant(specsDir + "/attention.yaml");
  const std::string scheduleText = args.get("schedule", "3:1");
  mc.schedule = spec::loadSchedule(scheduleText);
  const std::string presetName = args.get("preset", "tiny");
  mc.preset = spec::loadPreset(presetName, specsDir + "/presets");

  // Task, data and tokenizer. MQAR needs neither a corpus nor a tokenizer: its ids are drawn
  // from the preset's vocabulary.
  const std::string task = args.get("task", "lm");
  if (task != "lm" && task != "mqar") throw UsageError("--task must be lm or mqar, got '" + task + "'");
  const bool mqarTask = task == "mqar";
  if (mqarTask && (args.has("data") || args.has("tokenizer")))
    throw UsageError("--data and --tokenizer are for --task lm; --task mqar generates its sequences");
  if (!mqarTask && args.has("mqar-pairs")) throw UsageError("--mqar-pairs needs --task mqar");
  const int64_t mqarPairs = args.getInt("mqar-pairs", kDefaultMqarPairs);
  const std::string tok = mqarTask ? "none" : args.get("tokenizer", "byte");
  std::unique_ptr<data::Tokenizer> tokenizer =
      mqarTask ? nullptr : tok == "byte" ? data::makeByteTokenizer() : data::makeSentencePieceTokenizer(tok);
  data::Corpus corpus;
  if (!mqarTask)
    corpus = args.has("data") ? data::loadCorpus(args.get("data", ""), *tokenizer) : data::defaultCorpus(*tokenizer);
  if (tokenizer && mc.preset.vocab != tokenizer->vocabSize()) {
    std::cout << "note: preset " << mc.preset.name << " has vocab " << mc.preset.vocab << "; using the "
              << tokenizer->name() << " tokenizer's " << tokenizer->vocabSize() << "\n";
    mc.preset.vocab = tokenizer->vocabSize();
  }

  trainer::TrainConfig tc;
  tc.steps = args.getInt("steps", kDefaultSteps);
  tc.batch = args.getInt("batch", mqarTask ? kDefaultMqarBatch : kDefaultBatch);
  tc.seqLen = args.getInt("seq-len", mqarTask ? kDefaultMqarSeqLen : kDefaultSeqLen);
  tc.accumulation = args.getInt("accumulation", 1);
  tc.lr = std::stod(args.get("lr", std::to_string(kDefaultLr)));
  tc.warmupSteps = args.getInt("warmup", std::max<int64_t>(1, tc.steps / 10));
  tc.evalEvery = args.getInt("eval-every", std::max<int64_t>(1, tc.steps / 4));
  tc.logEvery = args.getInt("log-every", 10);
  tc.checkpointEvery = args.getInt("checkpoint-every", std::max<int64_t>(1, tc.steps / 4));
  tc.seed = static_cast<uint64_t>(args.getInt("seed", 0));
  tc.resume = args.has("resume");
  tc.outDir = args.get("out", "runs/" + mc.linear.name + "-" + mc.schedule.text + "-" + mc.preset.name);
  std::replace(tc.outDir.begin(), tc.outDir.end(), ':', '_');  // "3:1" in a path is awkward
  const std::string device = args.get("device", torch::cuda::is_available() ? "cuda" : "cpu");
  if (device != "cpu" && device != "cuda") throw UsageError("--device must be cpu or cuda");
  tc.device = device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  if (tc.steps < 1 || tc.batch < 1 || tc.seqLen < 2 || tc.accumulation < 1)
    throw UsageError("--steps, --batch, --accumulation must be >= 1 and --seq-len >= 2");
#ifdef LINAC_HAVE_DISTRIBUTED
  if (distributed::launchedDistributed()) {
    dist = distributed::initFromEnvironment(tc.device);
    if (tc.device.is_cuda()) tc.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dist->localRank));
    if (!dist->isMaster()) std::cout.setstate(std::ios::badbit);  // only rank 0 prints (errors go to cerr)
  }
#endif

  torch::manual_seed(tc.seed);
  model::HybridLM lm(mc);
  lm->to(tc.device);
#ifdef LINAC_HAVE_DISTRIBUTED
  if (dist) {
    distributed::broadcastParameters(*lm, *dist);
    std::cout << "data parallel: " << dist->worldSize << " ranks x batch " << tc.batch << " = global batch "
              << dist->worldSize * tc.batch << " (x accumulation " << tc.accumulation << "), gradient allreduce "
              << (args.has("no-overlap") ? "after backward (--no-overlap)" : "overlapped with backward") << "\n";
  }
#endif
  std::cout << "linac train " << mc.linear.name << " | schedule " << mc.schedule.text << " | preset "
            << mc.preset.name << " | " << lm->parameterCount() << " parameters | device " << device << "\n";
  std::cout << "layers:";
  for (const auto& n : lm->layerNames()) std::cout << " " << n;
  if (mqarTask)
    std::cout << "\ndata: mqar, " << mqarPairs << " key-value pairs per sequence of " << tc.seqLen
              << " tokens (fresh sequences; loss on the answers only), " << kMqarHeldOut << " held out\n";
  else
    std::cout << "\ndata: " << corpus.description << " (" << corpus.train.size() << " training tokens, "
              << corpus.heldOut.size() << " held out)\n";

  std::filesystem::create_directories(tc.outDir);
  if (tc.resume) {  // the data stream's state is checkpointed, not its task: a resume keeps both
    std::ifstream previous(tc.outDir + "/model.json");
    const std::string json((std::istreambuf_iterator<char>(previous)), std::istreambuf_iterator<char>());
    std::smatch m;
    const std::string before = std::regex_search(json, m, std::regex("\"task\": \"(\\w+)\"")) ? m[1].str() : "lm";
    const std::string pairs = std::regex_search(json, m, std::regex("\"mqar_pairs\": (\\d+)")) ? m[1].str() : "";
    if (!json.empty() && (before != task || (mqarTask && pairs != std::to_string(mqarPairs))))
      throw UsageError("cannot resume " + tc.outDir + " with --task " + task +
                       (mqarTask ? " --mqar-pairs " + std::to_string(mqarPairs) : "") + ": it was trained with --task " +
                       before + (pairs.empty() ? "" : " --mqar-pairs " + pairs));
  }
#ifdef LINAC_HAVE_DISTRIBUTED
  if (!dist || dist->isMaster())  // only rank 0 writes files
#endif
  {
    std::ofstream m(tc.outDir + "/model.json");
    m << "{\"spec\": \"" << jsonEscape(absolutePath(specPath)) << "\", \"preset\": \""
      << jsonEscape(presetName) << "\", \"schedule\": \"" << jsonEscape(scheduleText) << "\", \"tokenizer\": \""
      << jsonEscape(tok) << "\", \"vocab\": " << mc.preset.vocab << ", \"seq_len\": " << tc.seqLen
      << ", \"task\": \"" << task << "\"";
    if (mqarTask) m << ", \"mqar_pairs\": " << mqarPairs;
    m << "}\n";
  }

  const double unigram = mqarTask ? 0.0 : eval::unigramEntropy(corpus.train, mc.preset.vocab);
  // MQAR: the training stream's state is (seed, examples consumed), so a resume continues it; the
  // held-out sequences come from another seed and are scored (loss, accuracy) at each evaluation.
  std::unique_ptr<data::TokenStream> stream;
  torch::Tensor heldOut;
  try {
    if (mqarTask) {
      stream = data::makeMqarStream(tc.seqLen, mqarPairs, mc.preset.vocab, tc.seed);
      data::MqarBatch held = data::makeMqar(kMqarHeldOut, tc.seqLen, mqarPairs, mc.preset.vocab, tc.seed + 1);
      heldOut = torch::stack({held.inputs, held.targets}, 1);  // [kMqarHeldOut, 2, seqLen]
    } else {
      stream = data::makePackedStream(corpus.train, tc.seqLen, tc.seed);
      heldOut = heldOutWindows(corpus.heldOut, tc.seqLen);  // [N, seqLen + 1]
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--task ") + task + ": " + e.what() + " (see --seq-len, --mqar-pairs)");
  }
  auto forward = [&](const torch::Tensor& tokens) { return lm->forward(tokens); };
  trainer::TrainHooks hooks;
  // A non-finite loss: the error names the first layer whose output is non-finite.
  hooks.locateNonFinite = [&](const torch::Tensor& inputs) { return lm->locateNonFinite(inputs); };
  data::TokenStream* trainStream = stream.get();
#ifdef LINAC_HAVE_DISTRIBUTED
  std::unique_ptr<distributed::ShardedStream> sharded;
  if (dist) {  // each rank its slice of every global batch; gradients averaged before clipping
    sharded = std::make_unique<distributed::ShardedStream>(*stream, dist->rank, dist->worldSize);
    trainStream = sharded.get();
    // Bucket allreduces overlap with the last micro-batch's backward unless --no-overlap.
    distributed::GradSyncOptions sync;
    sync.overlap = !args.has("no-overlap");
    auto gradSync = distributed::gradientAveragingHooks(lm.ptr(), *dist, sync);
    hooks.beforeBackward = std::move(gradSync.beforeBackward);
    hooks.afterBackward = std::move(gradSync.afterBackward);
    hooks.isLoggingRank = dist->isMaster();
  }
#endif
  trainer::Trainer t(tc, lm.ptr(), forward, *trainStream, heldOut, hooks);
  trainer::TrainResult result = t.run();
#ifdef LINAC_HAVE_DISTRIBUTED
  if (dist && !dist->isMaster()) return 0;  // rank 0 alone evaluates and reports
#endif

  lm->eval();
  std::cout << std::fixed << std::setprecision(3);
  std::cout << "done: " << result.step << " steps" << (result.interrupted ? " (interrupted)" : "")
            << ", last training loss " << result.lastLoss << " nats";
  if (mqarTask) {
    // Chance: a uniform guess among the vocab/2 value ids, or a random pick of the sequence's values.
    std::cout << " on the answers; chance accuracy " << 1.0 / double(mc.preset.vocab / 2) << " (any value) / "
              << 1.0 / double(mqarPairs) << " (a value of the sequence)\n";
    std::vector<int64_t> pairs;
    for (int64_t p : {mqarPairs / 2, mqarPairs, 2 * mqarPairs})
      if (p >= 1 && 4 * p <= tc.seqLen && (pairs.empty() || pairs.back() != p)) pairs.push_back(p);
    for (const auto& r : eval::mqar(forward, pairs, tc.seqLen, mc.preset.vocab, kMqarExamples, tc.seed + 2, tc.device))
      std::cout << "mqar: " << r.pairs << " pairs, accuracy " << r.accuracy << " over " << r.queries << " queries"
                << (r.pairs == mqarPairs ? " (the trained number of pairs)" : "") << "\n";
    if (!result.lastCheckpoint.empty()) std::cout << "checkpoint: " << result.lastCheckpoint << "\n";
    return 0;
  }
  std::cout << "; unigram baseline " << unigram << " nats\n";
  if (heldOut.size(0) > 0) {
    auto ppl = eval::perplexity(forward, heldOut, tc.batch, tc.device);
    std::cout << "held-out: loss " << ppl.loss << " nats, perplexity " << ppl.ppl << " over " << ppl.tokens
              << " tokens\n";
  }
  for (const auto& r : eval::mqar(forward, kMqarPairs, tc.seqLen, mc.preset.vocab, kMqarExamples, tc.seed + 1,
                                  tc.device))
    std::cout << "mqar: " << r.pairs << " pairs, accuracy " << r.accuracy << " over " << r.queries
              << " queries (not trained on MQAR: near chance is expected)\n";
  if (!result.lastCheckpoint.empty()) std::cout << "checkpoint: " << result.lastCheckpoint << "\n";
  return 0;
}

}  // namespace linac::cli
