// `linac train SPEC --schedule S --preset P [--task lm|mqar]`: build the hybrid model from the
// specs, train it on the given data (the embedded corpus by default) or on freshly generated MQAR
// sequences (--task mqar: loss on the answers only), then report held-out perplexity against the
// unigram baseline (lm) and MQAR recall. The run directory (--out) belongs to one run: a fresh
// start needs it empty (or --overwrite); `--resume` continues it from the copies of its inputs
// and its stored config, each flag given on the command line checked against them
// (trainer/run_dir.h). Flags may come from `--config FILE` (YamlConfig.h; the command line wins),
// and every flag's effective value is written to the run's config.yaml at each start, after the
// `linac --version` line. Exit codes: 0 done, 1 failed, 2 usage or refused, 128 + signal stopped.
#include "Commands.h"
#include "KernelLookup.h"
#include "Version.h"
#include "YamlConfig.h"

#include "data/data.h"
#include "data/token_shards.h"
#include "eval/eval.h"
#include "eval/run_model.h"
#include "linac/Spec/SpecParser.h"
#include "model/model.h"
#include "trainer/batch_fit.h"
#include "trainer/device_memory.h"
#include "trainer/run_dir.h"
#include "trainer/trainer.h"
#ifdef LINAC_HAVE_DISTRIBUTED  // data parallel (runtime/distributed): --nproc, torchrun env
#include "distributed/distributed.h"
#include "distributed/grad_reducer.h"
#endif

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <climits>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <sstream>
#include <sys/stat.h>

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
/// Micro-batches of held-out windows per evaluation (--eval-batches; 0 = all): a large corpus's
/// held-out part would otherwise take minutes at every evaluation.
constexpr int64_t kDefaultEvalBatches = 50;
/// The share of a text corpus's documents held out for evaluation.
constexpr double kHeldOutFraction = 0.01;
/// Hex digits of a SHA-256 shown in messages.
constexpr size_t kShownHashChars = 12;
/// --find-batch's cap on a GPU: 1024 sequences (4M tokens a step at T = 4096).
constexpr int64_t kDefaultMaxBatch = 1024;

/// [N, seqLen + 1] windows over the held-out tokens (consecutive windows share one token: the
/// last target of one is the first input of the next), for evaluation.
torch::Tensor heldOutWindows(const std::vector<int64_t>& tokens, int64_t seqLen) {
  const int64_t n = tokens.empty() ? 0 : (int64_t(tokens.size()) - 1) / seqLen;
  if (n == 0) return torch::empty({0, seqLen + 1}, torch::kInt64);
  torch::Tensor all = torch::from_blob(const_cast<int64_t*>(tokens.data()), {int64_t(tokens.size())}, torch::kInt64);
  return all.as_strided({n, seqLen + 1}, {seqLen, 1}).clone();
}

bool isFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open for reading");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// On resume, each training flag left off the command line takes the run's stored value.
void keepStoredValues(trainer::TrainConfig& tc, const trainer::TrainConfig& stored, const CLI::App& app) {
  auto keep = [&](const char* flag, auto& field, const auto& value) {
    if (!given(app, flag)) field = value;
  };
  keep("steps", tc.steps, stored.steps);
  keep("batch", tc.batch, stored.batch);
  keep("seq-len", tc.seqLen, stored.seqLen);
  keep("accumulation", tc.accumulation, stored.accumulation);
  keep("lr", tc.lr, stored.lr);
  keep("warmup", tc.warmupSteps, stored.warmupSteps);
  keep("eval-every", tc.evalEvery, stored.evalEvery);
  keep("eval-batches", tc.evalBatches, stored.evalBatches);
  keep("log-every", tc.logEvery, stored.logEvery);
  keep("checkpoint-every", tc.checkpointEvery, stored.checkpointEvery);
  keep("seed", tc.seed, stored.seed);
}

/// A refusal of the run directory is a usage error (exit 2): a flag (--resume, --overwrite,
/// --accept-changes, --out) resolves it.
template <typename F>
auto refusalsAsUsage(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const trainer::RunRefused& e) {
    throw UsageError(e.what());
  }
}

/// realpath(3), not std::filesystem::absolute: the PyPI libtorch linked into `linac` exports an
/// ABI-incompatible copy of several std::filesystem functions.
std::string absolutePath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

/// A number as a config file writes it back: the shortest text that reads as the same double.
std::string numberText(double value) {
  std::ostringstream text;
  text << std::setprecision(std::numeric_limits<double>::max_digits10) << value;
  return text.str();
}

/// The flags of `linac train` (addTrainCommand): the defaults that depend on other flags (the
/// task, --steps) are applied in runTrain, for the flags not given.
struct TrainFlags {
  std::string spec;
  std::string config;
  std::string schedule = "3:1";
  std::string preset = "tiny";
  std::string data;
  std::string tokenizer = "byte";
  std::string dataDtype;
  int64_t steps = kDefaultSteps;
  int64_t batch = kDefaultBatch;
  int64_t seqLen = kDefaultSeqLen;
  int64_t accumulation = 1;
  double lr = kDefaultLr;
  int64_t warmup = 0, evalEvery = 0, checkpointEvery = 0;  // given, or from --steps
  int64_t evalBatches = kDefaultEvalBatches;
  int64_t logEvery = 10;
  int64_t seed = 0;
  std::string out;
  std::string device = "auto";
  std::string specsDir = LINAC_SOURCE_DIR "/specs";
  int64_t nproc = 1;
  std::string task = "lm";
  int64_t mqarPairs = kDefaultMqarPairs;
  std::string fusedLoss = "on";
  int64_t profile = 0;
  bool resume = false, overwrite = false, acceptChanges = false, noOverlap = false, checkpointing = false;
  bool varlen = false, deterministic = false;
  bool findBatch = false;
  int64_t maxBatch = 0;  // --find-batch's cap; 0: kDefaultMaxBatch on a GPU, required on the CPU
};

/// --find-batch's summary and its JSON line (bench/results' "fit" rows); exit 0 when a batch fit.
int reportBatchFit(const trainer::BatchFit& fit, const trainer::TrainConfig& tc, const eval::RunInputs& in,
                   int64_t params, int64_t vocab, bool checkpointing) {
  const std::optional<int64_t> total = trainer::deviceTotalBytes(tc.device);
  nlohmann::json row = {{"bench", "fit"},        {"spec", in.spec},          {"schedule", in.schedule},
                        {"preset", in.preset},   {"params", params},         {"vocab", vocab}, {"T", tc.seqLen},
                        {"device", tc.device.str()}, {"largest_batch", fit.largest}, {"capped", fit.capped},
                        {"checkpointing", checkpointing}};
  if (total) row["device_bytes"] = *total;
  nlohmann::json trials = nlohmann::json::array();
  for (const trainer::FitTrial& t : fit.trials) {
    nlohmann::json j = {{"batch", t.batch}, {"fits", t.fits}};
    if (t.fits) j["step_seconds"] = t.seconds;
    if (t.peakBytes) j["peak_bytes"] = *t.peakBytes;
    trials.push_back(j);
  }
  row["trials"] = trials;
  std::cout << trainer::describeFit(fit, tc.seqLen, tc.device, total) << "\n";
  std::cout << row.dump() << std::endl;
  return fit.largest > 0 ? 0 : 1;
}

int runTrain(CLI::App& app, TrainFlags& f, const std::vector<std::string>& argv) {
  if (!f.config.empty()) applyYamlConfig(app, f.config);  // the command line's flags win
  auto has = [&](const char* flag) { return given(app, flag); };
  // Data parallel: `--nproc N` re-runs this command as N local ranks (each sees WORLD_SIZE and
  // becomes a worker below); a torchrun-style environment (WORLD_SIZE set) makes this a worker.
  const int64_t nproc = f.nproc;
  if (nproc < 1) throw UsageError("--nproc must be >= 1");
#ifdef LINAC_HAVE_DISTRIBUTED
  if (nproc > 1 && !distributed::launchedDistributed()) {
    std::cout << "linac train: launching " << nproc << " local ranks (Gloo on CPU, NCCL on CUDA)" << std::endl;
    const int rc = distributed::launchLocalWorkers(int(nproc), argv);
    if (rc != 0) std::cerr << "linac train: a rank failed (exit code " << rc << ")\n";
    return rc;
  }
  std::optional<distributed::DistContext> dist;
#else
  if (nproc > 1 || std::getenv("WORLD_SIZE"))
    throw UsageError("this build has no distributed training (install libgloo-dev and reconfigure)");
#endif
  if (f.deterministic) {
    // cuBLAS is deterministic with a fixed workspace, set before its first handle (torch refuses
    // deterministic matmuls on CUDA without it); every linac kernel path is checked as it runs
    // (ops/kernel_dispatch.cpp).
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    // The kernels' timed choices (kernels/cuda/autotune.h) could differ from machine to machine
    // and between runs without a shared cache: the measured heuristics instead, the same everywhere.
    ::setenv("LINAC_AUTOTUNE", "0", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  }
  const bool resume = f.resume;
  if (f.spec.empty() && !resume)
    throw UsageError("expected a SPEC file (with --resume it may be left out: the run's copy is used)");
  if (resume && f.overwrite)
    throw UsageError("--resume continues the run in --out and --overwrite replaces it: give one of them");
  const std::string& specsDir = f.specsDir;

  // The run directory: --out, or a name made of the spec's, schedule's and preset's.
  std::string outDir = f.out;
  if (outDir.empty()) {
    if (f.spec.empty()) throw UsageError("--resume without SPEC needs --out RUN_DIR");
    outDir = "runs/" + spec::loadVariant(f.spec).name + "-" + spec::loadSchedule(f.schedule).text + "-" +
             spec::loadPreset(f.preset, specsDir + "/presets").name;
    std::replace(outDir.begin(), outDir.end(), ':', '_');  // "3:1" in a path is awkward
  }

  // The inputs: on resume, each one left off the command line is the run's copy (checked
  // against its recorded hash); given ones are compared with the run's before anything starts.
  const bool haveRun = resume && isFile(outDir + "/model.json");
  eval::RunInputs in;
  if (haveRun) {
    in = eval::storedRunInputs(outDir);
  } else {
    in.schedule = "3:1";
    in.preset = "tiny";
    in.mqarPairs = kDefaultMqarPairs;
  }
  if (!f.spec.empty()) in.spec = f.spec;
  else if (!haveRun) throw UsageError(outDir + " holds no run to resume (no model.json); give SPEC to start one");
  if (!haveRun || has("specs-dir")) in.attention = specsDir + "/attention.yaml";
  in.presetDir = specsDir + "/presets";
  if (has("schedule")) in.schedule = f.schedule;
  if (has("preset")) in.preset = f.preset;
  if (has("task")) in.task = f.task;
  if (has("mqar-pairs")) in.mqarPairs = f.mqarPairs;

  // Task, data and tokenizer. MQAR needs neither a corpus nor a tokenizer: its ids are drawn
  // from the preset's vocabulary.
  const std::string task = in.task;
  if (task != "lm" && task != "mqar") throw UsageError("--task must be lm or mqar, got '" + task + "'");
  const bool mqarTask = task == "mqar";
  if (mqarTask && (has("data") || has("tokenizer") || has("data-dtype")))
    throw UsageError("--data, --data-dtype and --tokenizer are for --task lm; --task mqar generates its sequences");
  if (!mqarTask && has("mqar-pairs")) throw UsageError("--mqar-pairs needs --task mqar");
  if (mqarTask && f.varlen) throw UsageError("--varlen is for --task lm: an MQAR sequence is one document");
  const int64_t mqarPairs = in.mqarPairs;
  if (mqarTask) in.tokenizer = "none";
  else if (has("tokenizer")) in.tokenizer = f.tokenizer;
  else if (in.tokenizer == "none") in.tokenizer = "byte";  // a resume that switches from mqar: refused later
  std::unique_ptr<data::Tokenizer> tokenizer =
      mqarTask ? nullptr
               : in.tokenizer == "byte" ? data::makeByteTokenizer() : data::makeSentencePieceTokenizer(in.tokenizer);
  eval::RunModel run = eval::describeRun(in, tokenizer ? tokenizer->vocabSize() : 0);
  model::ModelConfig mc = run.config;
  if (mc.linear.kind != spec::VariantKind::Linear)
    throw UsageError("train takes a linear variant spec; full attention comes from the schedule "
                     "(use --schedule transformer for an all-attention model)");
  if (tokenizer && run.presetVocab != mc.preset.vocab)
    std::cout << "note: preset " << mc.preset.name << " has vocab " << run.presetVocab << "; using the "
              << tokenizer->name() << " tokenizer's " << mc.preset.vocab << "\n";

  trainer::TrainConfig tc;
  tc.steps = f.steps;
  tc.batch = has("batch") ? f.batch : mqarTask ? kDefaultMqarBatch : kDefaultBatch;
  tc.seqLen = has("seq-len") ? f.seqLen : mqarTask ? kDefaultMqarSeqLen : kDefaultSeqLen;
  tc.accumulation = f.accumulation;
  tc.lr = f.lr;
  tc.warmupSteps = has("warmup") ? f.warmup : std::max<int64_t>(1, tc.steps / 10);
  tc.evalEvery = has("eval-every") ? f.evalEvery : std::max<int64_t>(1, tc.steps / 4);
  tc.evalBatches = f.evalBatches;
  tc.logEvery = f.logEvery;
  tc.checkpointEvery = has("checkpoint-every") ? f.checkpointEvery : std::max<int64_t>(1, tc.steps / 4);
  tc.seed = static_cast<uint64_t>(f.seed);
  tc.resume = resume;
  tc.overwrite = f.overwrite;
  tc.acceptChanges = f.acceptChanges;
  tc.outDir = outDir;
  if (haveRun && isFile(outDir + "/config.json"))
    keepStoredValues(tc, trainer::configFromJson(readText(outDir + "/config.json")), app);
  // The data: --data, else (on resume) the run's, else the embedded corpus.
  std::string dataPath;
  if (has("data")) dataPath = absolutePath(f.data);
  else if (haveRun && isFile(outDir + "/config.json"))
    dataPath = trainer::configFromJson(readText(outDir + "/config.json")).dataSource;
  if (mqarTask || dataPath == "embedded" || dataPath == "mqar") dataPath.clear();
  tc.dataSource = mqarTask ? "mqar" : dataPath.empty() ? "embedded" : dataPath;
  const std::string device = resolveDevice(f.device, torch::cuda::is_available());
  tc.device = device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  if (tc.steps < 1 || tc.batch < 1 || tc.seqLen < 2 || tc.accumulation < 1)
    throw UsageError("--steps, --batch, --accumulation must be >= 1 and --seq-len >= 2");
  if (tc.evalBatches < 0) throw UsageError("--eval-batches must be >= 0 (0: all held-out windows)");
  const std::string& fusedLoss = f.fusedLoss;
  // --find-batch: the search's cap (trainer/batch_fit.h); the CPU's allocator has no limit to find.
  int64_t maxBatch = f.maxBatch;
  if (f.findBatch) {
    if (nproc > 1 || resume || f.profile > 0)
      throw UsageError("--find-batch measures one process's steps and trains no run: not with --nproc, --resume "
                       "or --profile");
    if (maxBatch == 0 && tc.device.is_cpu())
      throw UsageError("--find-batch on the CPU needs --max-batch: the CPU's memory has no allocator limit to find, "
                       "so the search would stop only when the machine runs out");
    if (maxBatch == 0) maxBatch = kDefaultMaxBatch;
    if (maxBatch < 1) throw UsageError("--max-batch must be >= 1");
  } else if (has("max-batch")) {
    throw UsageError("--max-batch is the cap of --find-batch");
  }
  // --profile N: N steps after the warm-up, into RUN_DIR/profile (trainer/step_profile.h).
  tc.profileSteps = f.profile;
  // Token ids' width: checked against shard headers; the width of headerless .bin files.
  const std::string& dataDtype = f.dataDtype;
#ifdef LINAC_HAVE_DISTRIBUTED
  if (distributed::launchedDistributed()) {
    dist = distributed::initFromEnvironment(tc.device);
    if (tc.device.is_cuda()) tc.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dist->localRank));
    if (!dist->isMaster()) std::cout.setstate(std::ios::badbit);  // only rank 0 prints (errors go to cerr)
  }
  const bool master = !dist || dist->isMaster();
#else
  const bool master = true;
#endif
  // config.yaml: every flag's effective value at this start (applyYamlConfig reads it back).
  std::map<std::string, std::optional<std::string>> effective = {
      {"spec", in.spec}, {"schedule", in.schedule}, {"preset", in.preset}, {"steps", std::to_string(tc.steps)},
      {"batch", std::to_string(tc.batch)}, {"seq-len", std::to_string(tc.seqLen)},
      {"accumulation", std::to_string(tc.accumulation)}, {"lr", numberText(tc.lr)},
      {"warmup", std::to_string(tc.warmupSteps)}, {"eval-every", std::to_string(tc.evalEvery)},
      {"eval-batches", std::to_string(tc.evalBatches)}, {"log-every", std::to_string(tc.logEvery)},
      {"checkpoint-every", std::to_string(tc.checkpointEvery)}, {"seed", std::to_string(tc.seed)},
      {"out", tc.outDir}, {"device", device}, {"specs-dir", specsDir}, {"nproc", std::to_string(nproc)},
      {"task", task}, {"fused-loss", fusedLoss}};
  effective["data"] = dataPath.empty() ? std::nullopt : std::optional(dataPath);
  effective["data-dtype"] = dataDtype.empty() ? std::nullopt : std::optional(dataDtype);
  effective["tokenizer"] = mqarTask ? std::nullopt : std::optional(in.tokenizer);
  effective["mqar-pairs"] = mqarTask ? std::optional(std::to_string(mqarPairs)) : std::nullopt;
  effective["max-batch"] = std::nullopt;  // --find-batch's cap: no setting of a run
  std::vector<trainer::RunFile> runFiles = run.files;
  trainer::RunFile config{"config.yaml",
                          resolvedConfigYaml(app, effective,
                                             versionText() + "\nthe flags of this run's latest start, each with the "
                                             "value it took; `linac train --config` reads this file"),
                          false};
  config.everyStart = true;
  runFiles.push_back(std::move(config));
  // The run directory is locked and checked before the data is read and the model built; the
  // trainer checks again under the same lock before it writes anything.
  std::optional<trainer::RunLock> lock;
  if (master && !f.findBatch) {  // --find-batch trains no run: it leaves --out untouched
    lock.emplace(tc.outDir);
    refusalsAsUsage([&] { return trainer::checkRunDirectory(tc, runFiles); });
  }
  requireKernels(mc.linear, in.spec);  // may compile the spec: after the checks

  // Token shards are mapped, not loaded: the stream reads the windows it yields. Text (and
  // headerless .bin files) is read, tokenized and held in memory.
  std::shared_ptr<const data::TokenShards> shards;
  data::Corpus corpus;
  if (!mqarTask && !dataPath.empty() && data::isTokenShardPath(dataPath)) {
    shards = data::TokenShards::open(dataPath, dataDtype);
    if (shards->vocabSize() != mc.preset.vocab)
      throw data::DataError(shards->description() + ": the shards hold ids of a " +
                            std::to_string(shards->vocabSize()) + "-entry vocabulary, but the model's is " +
                            std::to_string(mc.preset.vocab) + " (tokenizer " + tokenizer->name() +
                            "); train with --tokenizer set to the SentencePiece model the shards were made with");
    // The same size is not the same vocabulary: the SentencePiece model must be the shards' own.
    if (in.tokenizer != "byte" && !shards->tokenizerSha256().empty()) {
      const std::string actual = spec::sha256Hex(readBytes(in.tokenizer));
      if (actual != shards->tokenizerSha256())
        throw data::DataError(shards->description() + ": made with another tokenizer than " + in.tokenizer +
                              " (its sha256 is " + actual.substr(0, kShownHashChars) +
                              "...); train with the model the shards were made with");
    }
  } else if (!mqarTask) {
    corpus = dataPath.empty() ? data::defaultCorpus(*tokenizer)
                              : data::loadCorpus(dataPath, *tokenizer, kHeldOutFraction, dataDtype.empty() ? "uint16" : dataDtype);
  }
  int rank = 0, worldSize = 1;  // the data-parallel rank reads its own windows

  torch::manual_seed(tc.seed);
  model::HybridLM lm(mc);
  lm->to(tc.device);
  lm->setCheckpointing(f.checkpointing);  // recompute each block in backward (model/checkpoint.h)
#ifdef LINAC_HAVE_DISTRIBUTED
  if (dist) {
    rank = dist->rank;
    worldSize = dist->worldSize;
    distributed::broadcastParameters(*lm, *dist);
    std::cout << "data parallel: " << dist->worldSize << " ranks x batch " << tc.batch << " = global batch "
              << dist->worldSize * tc.batch << " (x accumulation " << tc.accumulation << "), gradient allreduce "
              << (f.noOverlap ? "after backward (--no-overlap)" : "overlapped with backward") << "\n";
  }
#endif
  std::cout << "linac train " << mc.linear.name << " | schedule " << mc.schedule.text << " | preset "
            << mc.preset.name << " | " << lm->parameterCount() << " parameters | device " << device
            << (lm->checkpointing() ? " | activation checkpointing per block" : "") << "\n";
  std::cout << "layers:";
  for (const auto& n : lm->layerNames()) std::cout << " " << n;
  if (mqarTask)
    std::cout << "\ndata: mqar, " << mqarPairs << " key-value pairs per sequence of " << tc.seqLen
              << " tokens (fresh sequences; loss on the answers only), " << kMqarHeldOut << " held out\n";
  else if (!shards)
    std::cout << "\ndata: " << corpus.description << " (" << corpus.train.size() << " training tokens, "
              << corpus.heldOut.size() << " held out)\n";
  // Shards: whole documents at the end are held out (bounded: they are read into memory).
  std::vector<int64_t> heldOutTokens;
  int64_t shardTrainEnd = 0;
  if (shards) {
    shardTrainEnd = data::shardHeldOutStart(*shards, tc.seqLen + 1);
    heldOutTokens.resize(size_t(shards->tokens() - shardTrainEnd));
    shards->read(shardTrainEnd, int64_t(heldOutTokens.size()), heldOutTokens.data());
    std::cout << "\ndata: " << shards->description() << " (memory-mapped; " << shardTrainEnd
              << " training tokens, the last " << heldOutTokens.size() << " held out)\n";
  } else {
    heldOutTokens = std::move(corpus.heldOut);
  }
  if (!f.findBatch) std::cout << "run directory: " << tc.outDir << "\n";

  // The baseline: the unigram entropy of the training tokens (of the held-out ones for shards,
  // which are not read in full).
  const double unigram =
      mqarTask ? 0.0 : eval::unigramEntropy(shards ? heldOutTokens : corpus.train, mc.preset.vocab);
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
      stream = shards ? data::makeShardStream(shards, shardTrainEnd, tc.seqLen, tc.seed, rank, worldSize)
                      : data::makePackedStream(std::move(corpus.train), tc.seqLen, tc.seed, rank, worldSize);
      heldOut = heldOutWindows(heldOutTokens, tc.seqLen);  // [N, seqLen + 1]
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--task ") + task + ": " + e.what() + " (see --seq-len, --mqar-pairs)");
  }
  // --varlen: every window's documents (split after each separator) are sequences of their own,
  // in training and in the held-out evaluation. MQAR probes are single sequences.
  std::optional<int64_t> separator;
  if (f.varlen) {
    separator = shards ? shards->documentSeparator() : std::optional<int64_t>(tokenizer->documentSeparator());
    if (!separator)
      throw UsageError("--varlen: " + shards->description() + " record no document separator (their headers' "
                       "document_separator is null), so documents cannot be told apart in a window");
    std::cout << "documents kept apart (--varlen): a document ends with id " << *separator << "\n";
  }
  auto forward = [&](const torch::Tensor& tokens) {
    if (!separator) return lm->forward(tokens);
    const model::Documents documents = model::documentsEndingWith(tokens, *separator);
    return lm->forward(tokens, &documents);
  };
  auto plainForward = [&](const torch::Tensor& tokens) { return lm->forward(tokens); };
  trainer::TrainHooks hooks;
  // A non-finite loss: the error names the first layer whose output is non-finite.
  hooks.locateNonFinite = [&](const torch::Tensor& inputs) { return lm->locateNonFinite(inputs); };
  data::TokenStream* trainStream = stream.get();
#ifdef LINAC_HAVE_DISTRIBUTED
  std::unique_ptr<distributed::ShardedStream> sharded;
  if (dist) {  // each rank its slice of every global batch; gradients averaged before clipping
    if (mqarTask) {  // the language-modelling streams above read only this rank's windows already
      sharded = std::make_unique<distributed::ShardedStream>(*stream, dist->rank, dist->worldSize);
      trainStream = sharded.get();
    }
    // Bucket allreduces overlap with the last micro-batch's backward unless --no-overlap.
    distributed::GradSyncOptions sync;
    sync.overlap = !f.noOverlap;
    auto gradSync = distributed::gradientAveragingHooks(lm.ptr(), *dist, sync);
    hooks.beforeBackward = std::move(gradSync.beforeBackward);
    hooks.afterBackward = std::move(gradSync.afterBackward);
    hooks.isLoggingRank = dist->isMaster();
  }
#endif
  // The LM head and the loss in chunks of tokens (never the [tokens, vocab] logits), unless
  // --fused-loss off: the logits, then cross_entropy.
  auto fusedLossFn = [&](const torch::Tensor& inputs, const torch::Tensor& targets) {
    if (!separator) return lm->loss(inputs, targets);
    const model::Documents documents = model::documentsEndingWith(inputs, *separator);
    return lm->loss(inputs, targets, &documents);
  };
  if (f.findBatch) {
    auto makeTrainer = [&](int64_t batch) {
      trainer::TrainConfig trial = tc;
      trial.batch = batch;
      auto t = std::make_unique<trainer::Trainer>(trial, lm.ptr(), forward, *trainStream, heldOut, hooks);
      if (fusedLoss == "on") t->setLoss(fusedLossFn);
      return t;
    };
    return reportBatchFit(trainer::findLargestBatch(makeTrainer, *lm, tc.device, tc.seqLen, maxBatch, &std::cout),
                          tc, in, lm->parameterCount(), mc.preset.vocab, lm->checkpointing());
  }
  trainer::Trainer t(tc, lm.ptr(), forward, *trainStream, heldOut, hooks);
  t.setRunFiles(runFiles);
  if (fusedLoss == "on") t.setLoss(fusedLossFn);
  trainer::TrainResult result = refusalsAsUsage([&] { return t.run(); });
  // Stopped by a signal (or another rank's): 128 + the signal, as a shell reports a killed
  // process (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP); never 0, and no end-of-run evaluation.
  const int stoppedCode = 128 + (result.stopSignal ? result.stopSignal : SIGINT);
#ifdef LINAC_HAVE_DISTRIBUTED
  if (!master) return result.interrupted ? stoppedCode : 0;  // rank 0 alone evaluates and reports
#endif
  if (result.interrupted) {
    std::cout << "stopped: " << result.step << " steps; resume with: linac train --resume --out " << tc.outDir
              << std::endl;
    return stoppedCode;
  }
  if (result.step == result.resumedFrom) return 0;  // the run was already complete

  lm->eval();
  std::cout << std::fixed << std::setprecision(3);
  std::cout << "done: " << result.step << " steps, last training loss " << result.lastLoss << " nats";
  if (mqarTask) {
    // Chance: a uniform guess among the vocab/2 value ids, or a random pick of the sequence's values.
    std::cout << " on the answers; chance accuracy " << 1.0 / double(mc.preset.vocab / 2) << " (any value) / "
              << 1.0 / double(mqarPairs) << " (a value of the sequence)\n";
    std::vector<int64_t> pairs;
    for (int64_t p : {mqarPairs / 2, mqarPairs, 2 * mqarPairs})
      if (p >= 1 && 4 * p <= tc.seqLen && (pairs.empty() || pairs.back() != p)) pairs.push_back(p);
    for (const auto& r : eval::mqar(plainForward, pairs, tc.seqLen, mc.preset.vocab, kMqarExamples, tc.seed + 2, tc.device))
      std::cout << "mqar: " << r.pairs << " pairs, accuracy " << r.accuracy << " over " << r.queries << " queries"
                << (r.pairs == mqarPairs ? " (the trained number of pairs)" : "") << "\n";
    if (!result.lastCheckpoint.empty()) std::cout << "checkpoint: " << result.lastCheckpoint << "\n";
    return 0;
  }
  std::cout << "; unigram baseline " << unigram << " nats\n";
  if (result.lastEval)  // the trainer's end-of-run evaluation (after the final checkpoint)
    std::cout << "held-out: loss " << result.lastEval->loss << " nats, perplexity " << result.lastEval->ppl
              << " over " << result.lastEval->targets << " tokens"
              << (tc.evalBatches > 0 && heldOut.size(0) > tc.evalBatches * tc.batch
                      ? " (" + std::to_string(tc.evalBatches) + " batches; --eval-batches 0 for all)"
                      : std::string())
              << "\n";
  for (const auto& r : eval::mqar(plainForward, kMqarPairs, tc.seqLen, mc.preset.vocab, kMqarExamples, tc.seed + 1,
                                  tc.device))
    std::cout << "mqar: " << r.pairs << " pairs, accuracy " << r.accuracy << " over " << r.queries
              << " queries (not trained on MQAR: near chance is expected)\n";
  if (!result.lastCheckpoint.empty()) std::cout << "checkpoint: " << result.lastCheckpoint << "\n";
  return 0;
}

}  // namespace

Command addTrainCommand(CLI::App& root) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* app = root.add_subcommand(
      "train", "build the hybrid model from the specs and train it (the embedded corpus by default); the run "
               "directory --out holds its checkpoints, metrics, config.yaml and copies of its inputs");
  app->add_option("SPEC", f->spec, "the linear variant spec (YAML); with --resume, the run's copy by default");
  app->add_option("--config", f->config,
                  "a YAML file of these flags (their long names without dashes: `lr: 1e-3`); the command line "
                  "overrides it");
  app->add_option("--schedule", f->schedule, "where full attention goes: 3:1, pure, transformer or a file")
      ->capture_default_str();
  app->add_option("--preset", f->preset, "the model size: a preset of specs/presets (tiny, small, 340m, 1.3b, mqar) or a preset file")->capture_default_str();
  app->add_option("--task", f->task, "lm: language modelling on --data; mqar: generated MQAR sequences")
      ->check(CLI::IsMember({"lm", "mqar"}))
      ->capture_default_str();
  app->add_option("--data", f->data, "text, a folder of documents, or token shards (default: the embedded corpus)");
  app->add_option("--tokenizer", f->tokenizer, "byte, or a SentencePiece .model file")->capture_default_str();
  app->add_option("--data-dtype", f->dataDtype, "token id width of .bin data: uint16 or uint32 (default: from the "
                                                "shard header; uint16 for headerless files)")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  app->add_option("--mqar-pairs", f->mqarPairs, "--task mqar: key-value pairs per sequence")->capture_default_str();
  app->add_option("--steps", f->steps, "optimizer steps of the whole run")->capture_default_str();
  app->add_option("--batch", f->batch, "sequences per micro-batch")
      ->default_str(std::to_string(kDefaultBatch) + " (" + std::to_string(kDefaultMqarBatch) + " with --task mqar)");
  app->add_option("--seq-len", f->seqLen, "tokens per sequence")
      ->default_str(std::to_string(kDefaultSeqLen) + " (" + std::to_string(kDefaultMqarSeqLen) +
                    " with --task mqar)");
  app->add_option("--accumulation", f->accumulation, "micro-batches per optimizer step")->capture_default_str();
  app->add_option("--lr", f->lr, "peak learning rate (linear warmup, then cosine decay)")->capture_default_str();
  app->add_option("--warmup", f->warmup, "warmup steps")->default_str("steps/10");
  app->add_option("--seed", f->seed, "seeds the initialization and the data order")->capture_default_str();
  app->add_option("--out", f->out, "the run directory (default: runs/<spec>-<schedule>-<preset>)");
  app->add_flag("--resume", f->resume, "continue the run in --out from its newest intact checkpoint");
  app->add_flag("--overwrite", f->overwrite, "replace the run in --out (a fresh start needs it empty otherwise)");
  app->add_flag("--accept-changes", f->acceptChanges, "a resume may change lr, warmup, seed, data, ...");
  app->add_option("--eval-every", f->evalEvery, "steps between held-out evaluations")->default_str("steps/4");
  app->add_option("--eval-batches", f->evalBatches, "micro-batches per evaluation; 0 = all held-out windows")
      ->capture_default_str();
  app->add_option("--log-every", f->logEvery, "steps between progress and metrics lines")->capture_default_str();
  app->add_option("--checkpoint-every", f->checkpointEvery, "steps between checkpoints")->default_str("steps/4");
  addDeviceOption(*app, f->device);
  app->add_option("--nproc", f->nproc, "data-parallel local ranks (Gloo on CPU, NCCL on CUDA)")->capture_default_str();
  app->add_flag("--no-overlap", f->noOverlap, "data parallel: allreduce gradients after backward, not during it");
  app->add_option("--fused-loss", f->fusedLoss, "on: the LM head and loss in chunks of tokens; off: full logits")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app->add_flag("--checkpointing", f->checkpointing,
                "activation checkpointing per block: recompute each block in the backward (less memory)");
  app->add_flag("--deterministic", f->deterministic,
                "the same bits on every run: torch's deterministic algorithms, an error for a linac CUDA "
                "kernel that sums with atomics (the exact per-token backward), and "
                "the kernels' fixed heuristics instead of timed choices (LINAC_AUTOTUNE=0)");
  app->add_flag("--find-batch", f->findBatch,
                "instead of training: the largest --batch whose training step (forward, backward, AdamW) fits the "
                "device at --seq-len, by doubling then bisecting; prints each trial's peak memory, writes no run");
  app->add_option("--max-batch", f->maxBatch, "--find-batch: the largest batch to try")
      ->default_str(std::to_string(kDefaultMaxBatch) + " on a GPU; required on the CPU");
  app->add_flag("--varlen", f->varlen,
                "keep the documents packed into a window apart (as flame's varlen training): each starts from a "
                "zero state, its own positions and attention, at the token after a document separator");
  app->add_option("--profile", f->profile,
                  "profile N steps after 2 warm-up steps into RUN_DIR/profile (trace + time by category)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app->add_option("--specs-dir", f->specsDir, "where presets/ and attention.yaml are found")->capture_default_str();
  return {app, [app, f](const std::vector<std::string>& argv) { return runTrain(*app, *f, argv); }};
}

}  // namespace linac::cli
