// Data-parallel training over c10d Gloo: 2 ranks x batch b must follow the same loss curve as
// 1 rank x batch 2b. The binary is its own worker: with LINAC_DIST_TEST_WORKER set (by
// launchLocalWorkers, which also sets RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT) it
// trains one rank and writes its losses; otherwise it runs the GoogleTest suite, which spawns
// the workers and trains the single-rank reference in-process.
#include "distributed/distributed.h"
#include "trainer/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

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

// A tiny real LM: embedding, a GELU MLP, untied output projection.
struct TinyLMImpl : torch::nn::Module {
  TinyLMImpl()
      : emb(register_module("emb", torch::nn::Embedding(kVocab, 16))),
        up(register_module("up", torch::nn::Linear(16, 64))),
        down(register_module("down", torch::nn::Linear(64, 16))),
        gain(register_parameter("gain", torch::ones({16}))),
        out(register_module("out", torch::nn::Linear(16, kVocab))) {}
  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::Tensor h = emb->forward(tokens);
    h = h + down->forward(torch::gelu(up->forward(h)));
    return out->forward(h * gain);
  }
  torch::nn::Embedding emb;
  torch::nn::Linear up, down;
  torch::Tensor gain;
  torch::nn::Linear out;
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
};

// Trains kSteps steps; ctx == nullptr is the single-rank reference with `batch` rows per micro-batch.
// stopAtStep > 0: rank 1 alone calls requestStop() after that step (all ranks must stop after the next).
RunResult train(const distributed::DistContext* ctx, int64_t batch, const std::string& outDir, int64_t bucketBytes,
                int64_t stopAtStep = 0) {
  torch::set_num_threads(1);
  // Different initial weights per rank: broadcastParameters must make them rank 0's.
  torch::manual_seed(ctx ? 7 + 1000 * uint64_t(ctx->rank) : 7);
  TinyLM model;
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
  tc.accumulation = 2;
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
    if (ctx && ctx->rank == 1 && s.step == stopAtStep)
      self->requestStop();
  };
  if (ctx) {
    hooks.afterBackward = distributed::gradientAveragingHook(model.ptr(), *ctx, bucketBytes);
    hooks.isLoggingRank = ctx->rank == 0;
  }
  trainer::Trainer t(tc, model.ptr(), [&](const torch::Tensor& x) { return model->forward(x); }, stream, {},
                     hooks);
  self = &t;
  t.setProgressStream(nullptr);
  t.run();
  torch::NoGradGuard ng;
  for (const auto& p : model->parameters())
    result.checksum += (p.to(torch::kFloat64) * torch::arange(p.numel(), torch::kFloat64).view_as(p).add(1))
                           .sum()
                           .item<double>();
  return result;
}

int workerMain() {
  alarm(90);  // bounded whatever happens to the other rank
  const std::string mode = std::getenv("LINAC_DIST_TEST_WORKER");
  auto ctx = distributed::initFromEnvironment(torch::kCPU);
  if (mode == "fail")
    return ctx.rank == 1 ? 3 : 0;
  const std::string out = std::getenv("LINAC_DIST_TEST_OUT");
  const int64_t bucket = std::atoll(std::getenv("LINAC_DIST_TEST_BUCKET"));
  RunResult r = train(&ctx, kRankBatch, out + "/run", bucket, mode == "stop" ? 2 : 0);
  std::ofstream f(out + "/rank" + std::to_string(ctx.rank) + ".txt");
  f.precision(17);
  for (size_t i = 0; i < r.loss.size(); ++i)
    f << r.loss[i] << " " << r.gradNorm[i] << "\n";
  f << "checksum " << r.checksum << "\n";
  distributed::barrier(ctx);
  return f ? 0 : 1;
}

RunResult readRank(const std::string& path) {
  RunResult r;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    if (line.rfind("checksum", 0) == 0) {
      std::string w;
      s >> w >> r.checksum;
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
  RunResult ref = train(nullptr, 2 * kRankBatch, (dir / "reference").string(), 0);

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
