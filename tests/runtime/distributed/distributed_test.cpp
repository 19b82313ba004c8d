// Data-parallel training over c10d Gloo: 2 ranks x batch b must follow the same loss curve as
// 1 rank x batch 2b; the gradient allreduce overlapped with backward must give bitwise the same
// training as the one after backward (--no-overlap), with gradient accumulation and with
// parameters that some or all ranks leave unused. The binary is its own worker: with LINAC_DIST_TEST_WORKER set (by
// launchLocalWorkers, which also sets RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT) it
// trains one rank and writes its losses; otherwise it runs the GoogleTest suite, which spawns
// the workers and trains the single-rank reference in-process.
#include "distributed/distributed.h"
#include "distributed/grad_reducer.h"
#include "kernels/cpu/thread_pool.h"
#include "trainer/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace linac;

namespace {

std::string gArgv0;

constexpr int64_t kVocab = 48;
constexpr int64_t kSeqLen = 16;
constexpr int64_t kRankBatch = 3;
constexpr int64_t kSteps = 5;

// A tiny real LM: embedding, a GELU MLP, untied output projection. With `extras`, two more
// parameters (no random initialization, so the others are initialized as without): `never`, used
// by no forward, and `someRanks`, used only when `useSomeRanks` is set (on one rank of two).
struct TinyLMImpl : torch::nn::Module {
  explicit TinyLMImpl(bool extras = false)
      : emb(register_module("emb", torch::nn::Embedding(kVocab, 16))),
        up(register_module("up", torch::nn::Linear(16, 64))),
        down(register_module("down", torch::nn::Linear(64, 16))),
        gain(register_parameter("gain", torch::ones({16}))),
        out(register_module("out", torch::nn::Linear(16, kVocab))) {
    if (extras) {
      never = register_parameter("never", torch::full({8}, 0.5));
      someRanks = register_parameter("some_ranks", torch::ones({16}));
    }
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::Tensor h = emb->forward(tokens);
    h = h + down->forward(torch::gelu(up->forward(h)));
    if (someRanks.defined() && useSomeRanks)
      h = h * someRanks;
    return out->forward(h * gain);
  }
  torch::nn::Embedding emb;
  torch::nn::Linear up, down;
  torch::Tensor gain;
  torch::nn::Linear out;
  torch::Tensor never, someRanks;
  bool useSomeRanks = false;
};
TORCH_MODULE(TinyLM);

std::vector<int64_t> corpus() {
  std::vector<int64_t> t(3000);
  uint64_t x = 12345;
  for (size_t i = 0; i < t.size(); ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    t[i] = i % 5 == 4 ? t[i - 1] : int64_t((x >> 33) % kVocab);  // some learnable structure
  }
  return t;
}

struct RunResult {
  std::vector<double> loss, gradNorm;
  double checksum = 0;
  double neverSum = 0;  // extras: the unused parameter's sum (it must keep its initial 4)
  distributed::GradSyncStats sync;
  size_t buckets = 0;
};

struct RunOptions {
  int64_t bucketBytes = 0;
  bool overlap = true;
  int64_t accumulation = 2;
  bool extras = false;     // TinyLM's unused parameters; `some_ranks` is used on rank 1 only
  int64_t stopAtStep = 0;  // > 0: rank 1 alone calls requestStop() after that step (all ranks stop after the next)
};

// Trains kSteps steps; ctx == nullptr is the single-rank reference with `batch` rows per micro-batch.
RunResult train(const distributed::DistContext* ctx, int64_t batch, const std::string& outDir,
                const RunOptions& options) {
  torch::set_num_threads(1);
  // Different initial weights per rank: broadcastParameters must make them rank 0's.
  torch::manual_seed(ctx ? 7 + 1000 * uint64_t(ctx->rank) : 7);
  TinyLM model(options.extras);
  model->useSomeRanks = ctx && ctx->rank == 1;
  if (ctx)
    distributed::broadcastParameters(*model, *ctx);
  auto base = data::makePackedStream(corpus(), kSeqLen, /*seed=*/3);
  std::unique_ptr<distributed::ShardedStream> sharded;
  if (ctx)
    sharded = std::make_unique<distributed::ShardedStream>(*base, ctx->rank, ctx->worldSize);
  data::TokenStream& stream = sharded ? static_cast<data::TokenStream&>(*sharded) : *base;

  trainer::TrainConfig tc;
  tc.steps = kSteps;
  tc.batch = batch;
  tc.accumulation = options.accumulation;
  tc.seqLen = kSeqLen;
  tc.lr = 1e-2;
  tc.warmupSteps = 2;
  tc.gradClip = 0.35;  // binds in the first steps: clipping must use the averaged gradients' norm
  tc.logEvery = 1;
  tc.outDir = outDir;
  tc.seed = 11;
  RunResult result;
  trainer::TrainHooks hooks;
  trainer::Trainer* self = nullptr;
  hooks.onStep = [&](const trainer::StepStats& s) {
    result.loss.push_back(s.loss);
    result.gradNorm.push_back(s.gradNorm);
    if (ctx && ctx->rank == 1 && s.step == options.stopAtStep)
      self->requestStop();
  };
  std::shared_ptr<distributed::GradientReducer> reducer;
  if (ctx) {
    auto sync = distributed::gradientAveragingHooks(
        model.ptr(), *ctx, distributed::GradSyncOptions{options.bucketBytes, options.overlap}, &reducer);
    hooks.beforeBackward = sync.beforeBackward;
    hooks.afterBackward = sync.afterBackward;
    hooks.isLoggingRank = ctx->rank == 0;
  }
  trainer::Trainer t(tc, model.ptr(), [&](const torch::Tensor& x) { return model->forward(x); }, stream, {},
                     hooks);
  self = &t;
  t.setProgressStream(nullptr);
  t.run();
  if (reducer) {
    result.sync = reducer->stats();
    result.buckets = reducer->bucketCount();
  }
  torch::NoGradGuard ng;
  if (model->never.defined())
    result.neverSum = model->never.sum().item<double>();
  for (const auto& p : model->parameters())
    result.checksum += (p.to(torch::kFloat64) * torch::arange(p.numel(), torch::kFloat64).view_as(p).add(1))
                           .sum()
                           .item<double>();
  return result;
}

bool writeRank(const std::string& path, const RunResult& r) {
  std::ofstream f(path);
  f.precision(17);
  for (size_t i = 0; i < r.loss.size(); ++i)
    f << r.loss[i] << " " << r.gradNorm[i] << "\n";
  f << "checksum " << r.checksum << "\n";
  f << "never " << r.neverSum << "\n";
  f << "sync " << r.sync.cycles << " " << r.sync.launchedInBackward << " " << r.sync.launchedAfterBackward << " "
    << r.buckets << "\n";
  return bool(f);
}

std::string envOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// Modes: train / stop (one run, overlap as LINAC_DIST_TEST_OVERLAP says, default on), compare /
// unused (two runs in one process, overlapped then not, written to rankN-overlap.txt and
// rankN-plain.txt; unused adds TinyLM's extras), fail (rank 1 exits 3).
int workerMain() {
  alarm(90);  // bounded whatever happens to the other rank (a hang fails the test, not ctest)
  const std::string mode = std::getenv("LINAC_DIST_TEST_WORKER");
  if (mode == "threads") {  // the thread settings this rank was given, and its CPU pool's size
    std::ofstream(std::string(std::getenv("LINAC_DIST_TEST_OUT")) + "/rank" + std::getenv("RANK") + ".txt")
        << envOr("OMP_NUM_THREADS", "unset") << " " << kernels::cpu::cpuThreadPool()->size() << "\n";
    return 0;
  }
  auto ctx = distributed::initFromEnvironment(torch::kCPU);
  if (mode == "fail")
    return ctx.rank == 1 ? 3 : 0;
  const std::string out = std::getenv("LINAC_DIST_TEST_OUT");
  const std::string rank = std::to_string(ctx.rank);
  RunOptions options;
  options.bucketBytes = std::atoll(envOr("LINAC_DIST_TEST_BUCKET", "0").c_str());
  options.accumulation = std::atoll(envOr("LINAC_DIST_TEST_ACCUMULATION", "2").c_str());
  bool ok = true;
  if (mode == "compare" || mode == "unused") {
    options.extras = mode == "unused";
    for (bool overlap : {true, false}) {
      options.overlap = overlap;
      const std::string name = overlap ? "overlap" : "plain";
      ok = ok && writeRank(out + "/rank" + rank + "-" + name + ".txt", train(&ctx, kRankBatch, out + "/" + name, options));
    }
  } else {
    options.overlap = envOr("LINAC_DIST_TEST_OVERLAP", "1") == "1";
    options.stopAtStep = mode == "stop" ? 2 : 0;
    ok = writeRank(out + "/rank" + rank + ".txt", train(&ctx, kRankBatch, out + "/run", options));
  }
  distributed::barrier(ctx);
  return ok ? 0 : 1;
}

RunResult readRank(const std::string& path) {
  RunResult r;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    std::string w;
    if (line.rfind("checksum", 0) == 0) {
      s >> w >> r.checksum;
    } else if (line.rfind("never", 0) == 0) {
      s >> w >> r.neverSum;
    } else if (line.rfind("sync", 0) == 0) {
      s >> w >> r.sync.cycles >> r.sync.launchedInBackward >> r.sync.launchedAfterBackward >> r.buckets;
    } else {
      double l, g;
      s >> l >> g;
      r.loss.push_back(l);
      r.gradNorm.push_back(g);
    }
  }
  return r;
}

// POSIX, not std::filesystem::remove_all/temp_directory_path: the PyPI libtorch exports an
// ABI-incompatible copy of several std::filesystem functions (remove_all crashes here).
int removeEntry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }
void removeTree(const fs::path& p) { ::nftw(p.c_str(), removeEntry, 16, FTW_DEPTH | FTW_PHYS); }

fs::path tempDir(const std::string& name) {
  std::string pattern = "/tmp/linac_dist_test_" + name + "_XXXXXX";
  if (!::mkdtemp(pattern.data()))
    throw std::runtime_error("mkdtemp failed");
  return fs::path(pattern);
}

bool pathExists(const fs::path& p) { return ::access(p.c_str(), F_OK) == 0; }

// A stream whose row i is filled with i, to check the sharding.
class CountingStream : public data::TokenStream {
public:
  torch::Tensor next(int64_t batch) override {
    torch::Tensor rows = torch::arange(pos_, pos_ + batch, torch::kInt64).unsqueeze(1).expand({batch, 3}).clone();
    pos_ += batch;
    return rows;
  }
  int64_t position() const override { return pos_; }
  void seek(int64_t p) override { pos_ = p; }
  int64_t tokensPerEpoch() const override { return 1000; }

private:
  int64_t pos_ = 0;
};

TEST(ShardedStream, RanksTakeDisjointSlicesOfTheGlobalBatch) {
  for (int rank = 0; rank < 3; ++rank) {
    CountingStream inner;
    distributed::ShardedStream s(inner, rank, 3);
    torch::Tensor a = s.next(2), b = s.next(2);
    EXPECT_EQ(a[0][0].item<int64_t>(), 2 * rank);
    EXPECT_EQ(a[1][0].item<int64_t>(), 2 * rank + 1);
    EXPECT_EQ(b[0][0].item<int64_t>(), 6 + 2 * rank);
    EXPECT_EQ(s.position(), 12);  // the underlying stream's position: the same on every rank
    s.seek(6);
    EXPECT_EQ(s.next(2)[0][0].item<int64_t>(), 6 + 2 * rank);
  }
  CountingStream inner;
  EXPECT_THROW(distributed::ShardedStream(inner, 3, 3), std::invalid_argument);
}

TEST(Distributed, TwoRanksMatchOneRankWithTheGlobalBatch) {
  const fs::path dir = tempDir("match");
  // 1 KiB buckets: the tiny model's gradients span several allreduces.
  int rc = distributed::launchLocalWorkers(
      2, {gArgv0},
      {{"LINAC_DIST_TEST_WORKER", "train"}, {"LINAC_DIST_TEST_OUT", dir.string()},
       {"LINAC_DIST_TEST_BUCKET", "1024"}, {"LINAC_DIST_TIMEOUT_S", "60"}, {"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(rc, 0);
  RunResult r0 = readRank((dir / "rank0.txt").string()), r1 = readRank((dir / "rank1.txt").string());
  RunResult ref = train(nullptr, 2 * kRankBatch, (dir / "reference").string(), RunOptions{});

  ASSERT_EQ(r0.loss.size(), size_t(kSteps));
  ASSERT_EQ(r1.loss.size(), size_t(kSteps));
  ASSERT_EQ(ref.loss.size(), size_t(kSteps));
  for (int64_t i = 0; i < kSteps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_EQ(r0.loss[size_t(i)], r1.loss[size_t(i)]);  // averaged: identical on both ranks
    EXPECT_NEAR(r0.loss[size_t(i)], ref.loss[size_t(i)], 1e-5 * std::abs(ref.loss[size_t(i)]));
    EXPECT_NEAR(r0.gradNorm[size_t(i)], ref.gradNorm[size_t(i)], 1e-5 * std::abs(ref.gradNorm[size_t(i)]));
    std::printf("step %lld: 2 ranks loss %.9f grad %.9f | 1 rank loss %.9f grad %.9f\n", (long long)(i + 1),
                r0.loss[size_t(i)], r0.gradNorm[size_t(i)], ref.loss[size_t(i)], ref.gradNorm[size_t(i)]);
  }
  EXPECT_LT(ref.loss.back(), ref.loss.front());  // it learns
  EXPECT_EQ(r0.checksum, r1.checksum);            // the ranks' weights stay bitwise identical
  EXPECT_NEAR(r0.checksum, ref.checksum, 1e-5 * std::abs(ref.checksum));

  // Only rank 0 wrote metrics (one line per step) and the final checkpoint.
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  int lines = 0;
  for (std::string l; std::getline(metrics, l);)
    lines += l.find("\"step\"") != std::string::npos;
  EXPECT_EQ(lines, kSteps);
  EXPECT_TRUE(pathExists(dir / "run" / "latest"));
  // The allreduces overlapped with backward: some buckets started from the gradient hooks, and
  // each bucket was launched exactly once a step (none for the first micro-batch of a step).
  EXPECT_EQ(r0.sync.cycles, kSteps);
  EXPECT_GT(r0.sync.launchedInBackward, 0);
  EXPECT_EQ(r0.sync.launchedInBackward + r0.sync.launchedAfterBackward, kSteps * int64_t(r0.buckets));
  removeTree(dir);
}

// Overlapped vs after-backward allreduce, each run on the same 2 ranks: bitwise the same training.
void expectSameTraining(const RunResult& overlap, const RunResult& plain) {
  ASSERT_EQ(overlap.loss.size(), size_t(kSteps));
  ASSERT_EQ(plain.loss.size(), size_t(kSteps));
  for (size_t i = 0; i < size_t(kSteps); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_EQ(overlap.loss[i], plain.loss[i]);
    EXPECT_EQ(overlap.gradNorm[i], plain.gradNorm[i]);
  }
  EXPECT_EQ(overlap.checksum, plain.checksum);
  EXPECT_EQ(overlap.buckets, plain.buckets);
  EXPECT_EQ(plain.sync.launchedInBackward, 0);
  EXPECT_EQ(plain.sync.launchedAfterBackward, kSteps * int64_t(plain.buckets));
  EXPECT_EQ(overlap.sync.launchedInBackward + overlap.sync.launchedAfterBackward, kSteps * int64_t(overlap.buckets));
}

TEST(Distributed, OverlappedAllreduceMatchesAllreduceAfterBackwardWithAccumulation) {
  const fs::path dir = tempDir("overlap");
  int rc = distributed::launchLocalWorkers(
      2, {gArgv0},
      {{"LINAC_DIST_TEST_WORKER", "compare"}, {"LINAC_DIST_TEST_OUT", dir.string()},
       {"LINAC_DIST_TEST_BUCKET", "1024"}, {"LINAC_DIST_TEST_ACCUMULATION", "3"}, {"LINAC_DIST_TIMEOUT_S", "60"},
       {"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(rc, 0);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    RunResult overlap = readRank((dir / ("rank" + std::to_string(rank) + "-overlap.txt")).string());
    RunResult plain = readRank((dir / ("rank" + std::to_string(rank) + "-plain.txt")).string());
    expectSameTraining(overlap, plain);
    EXPECT_GT(overlap.sync.launchedInBackward, 0);
    EXPECT_GT(overlap.buckets, 2u);
  }
  removeTree(dir);
}

TEST(Distributed, UnusedParametersDoNotHangAndKeepRanksInStep) {
  const fs::path dir = tempDir("unused");
  // `never` is used by no rank, `some_ranks` by rank 1 only. A hang would end in the workers'
  // alarm (90 s) or the collectives' timeout (30 s), i.e. a failing rc, not a stuck test.
  int rc = distributed::launchLocalWorkers(
      2, {gArgv0},
      {{"LINAC_DIST_TEST_WORKER", "unused"}, {"LINAC_DIST_TEST_OUT", dir.string()},
       {"LINAC_DIST_TEST_BUCKET", "1024"}, {"LINAC_DIST_TEST_ACCUMULATION", "2"}, {"LINAC_DIST_TIMEOUT_S", "30"},
       {"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(rc, 0);
  RunResult o0 = readRank((dir / "rank0-overlap.txt").string()), o1 = readRank((dir / "rank1-overlap.txt").string());
  RunResult p0 = readRank((dir / "rank0-plain.txt").string()), p1 = readRank((dir / "rank1-plain.txt").string());
  expectSameTraining(o0, p0);
  expectSameTraining(o1, p1);
  EXPECT_EQ(o0.checksum, o1.checksum);  // rank 0 got rank 1's averaged `some_ranks` gradient
  EXPECT_EQ(o0.neverSum, 4.0);          // no gradient anywhere: the optimizer never touched it
  EXPECT_EQ(o1.neverSum, 4.0);
  EXPECT_EQ(p0.neverSum, 4.0);
  removeTree(dir);
}

TEST(Distributed, AStopOnOneRankStopsAllRanksAtTheSameStep) {
  const fs::path dir = tempDir("stop");
  int rc = distributed::launchLocalWorkers(
      2, {gArgv0},
      {{"LINAC_DIST_TEST_WORKER", "stop"}, {"LINAC_DIST_TEST_OUT", dir.string()}, {"LINAC_DIST_TEST_BUCKET", "0"},
       {"LINAC_DIST_TIMEOUT_S", "60"}, {"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(rc, 0);
  // Rank 1 asked after step 2; the ranks agree on it during step 3's allreduce.
  EXPECT_EQ(readRank((dir / "rank0.txt").string()).loss.size(), 3u);
  EXPECT_EQ(readRank((dir / "rank1.txt").string()).loss.size(), 3u);
  EXPECT_TRUE(pathExists(dir / "run" / "ckpt-3.pt"));
  removeTree(dir);
}

TEST(Distributed, LauncherReportsAFailingRank) {
  const fs::path dir = tempDir("fail");
  int rc = distributed::launchLocalWorkers(
      2, {gArgv0}, {{"LINAC_DIST_TEST_WORKER", "fail"}, {"LINAC_DIST_TIMEOUT_S", "30"}, {"OMP_NUM_THREADS", "1"}});
  EXPECT_EQ(rc, 3);
  removeTree(dir);
}

// --nproc N gives each rank 1/N of the cores (OMP_NUM_THREADS, which sizes LibTorch's pool and
// the CPU kernels' pool) unless OMP_NUM_THREADS is set, which is then kept.
TEST(Distributed, LauncherSharesTheCoresAmongRanks) {
  const fs::path dir = tempDir("threads");
  const std::string given = envOr("OMP_NUM_THREADS", "");
  ::unsetenv("OMP_NUM_THREADS");
  const int rc = distributed::launchLocalWorkers(
      2, {gArgv0}, {{"LINAC_DIST_TEST_WORKER", "threads"}, {"LINAC_DIST_TEST_OUT", dir.string()}});
  if (!given.empty()) ::setenv("OMP_NUM_THREADS", given.c_str(), 1);
  ASSERT_EQ(rc, 0);
  const std::string share = std::to_string(std::max<int64_t>(1, kernels::cpu::hardwareThreadCount() / 2));
  for (const char* rank : {"0", "1"}) {
    std::ifstream f(dir / (std::string("rank") + rank + ".txt"));
    std::string omp, pool;
    f >> omp >> pool;
    EXPECT_EQ(omp, share) << "rank " << rank;
    EXPECT_EQ(pool, share) << "rank " << rank;
  }
  ASSERT_EQ(distributed::launchLocalWorkers(2, {gArgv0},
                                            {{"LINAC_DIST_TEST_WORKER", "threads"},
                                             {"LINAC_DIST_TEST_OUT", dir.string()},
                                             {"OMP_NUM_THREADS", "3"}}),
            0);
  std::ifstream f(dir / "rank1.txt");
  std::string omp, pool;
  f >> omp >> pool;
  EXPECT_EQ(omp, "3");
  EXPECT_EQ(pool, "3");
  removeTree(dir);
}

TEST(Distributed, EnvironmentErrorsNameTheVariable) {
  ::unsetenv("WORLD_SIZE");
  EXPECT_FALSE(distributed::launchedDistributed());
  try {
    distributed::initFromEnvironment(torch::kCPU);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("WORLD_SIZE"), std::string::npos) << e.what();
  }
}

}  // namespace

int main(int argc, char** argv) {
  gArgv0 = argv[0];
  if (std::getenv("LINAC_DIST_TEST_WORKER") && std::getenv("RANK")) {
    try {
      return workerMain();
    } catch (const std::exception& e) {
      std::cerr << "rank " << std::getenv("RANK") << ": " << e.what() << "\n";
      return 1;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
