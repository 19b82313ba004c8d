// The CPU kernels' thread pool (runtime/kernels/cpu/thread_pool.h): its size follows
// OMP_NUM_THREADS or the hardware, every index runs once on at most size() threads, errors reach
// the caller, nested jobs do not deadlock, and the kernels give bitwise the same results on any
// number of threads. No LibTorch: inputs are plain arrays.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace linac::kernels::cpu {
namespace {

TEST(ThreadCount, FollowsOmpNumThreadsElseTheHardware) {
  constexpr int64_t kHardware = 6;
  EXPECT_EQ(threadCountFor(nullptr, kHardware), kHardware);
  EXPECT_EQ(threadCountFor("3", kHardware), 3);
  EXPECT_EQ(threadCountFor("12", kHardware), 12);   // more than the cores: as asked
  EXPECT_EQ(threadCountFor("4,2", kHardware), 4);   // one entry per nesting level: the outer one
  for (const char* invalid : {"", "0", "-2", "abc", "3x", " "})
    EXPECT_EQ(threadCountFor(invalid, kHardware), kHardware) << "'" << invalid << "'";
  EXPECT_EQ(threadCountFor(nullptr, 0), 1);
  EXPECT_GE(hardwareThreadCount(), 1);
}

// Run by ctest twice: as is, and with OMP_NUM_THREADS=3 (tests/runtime/CMakeLists.txt).
TEST(ThreadCount, TheProcessPoolFollowsTheEnvironment) {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int64_t expected = omp ? std::atoll(omp) : hardwareThreadCount();
  EXPECT_EQ(defaultThreadCount(), expected);
  EXPECT_EQ(cpuThreadPool()->size(), expected);
  EXPECT_EQ(cpuThreadPool().get(), cpuThreadPool().get());  // one pool, not one per call
}

TEST(ThreadPool, RunsEveryIndexOnceOnAtMostItsThreads) {
  constexpr int64_t kThreads = 3, kCount = 200;
  ThreadPool pool(kThreads);
  EXPECT_EQ(pool.size(), kThreads);
  for (int repeat = 0; repeat < 3; ++repeat) {  // the same workers serve every job
    std::vector<std::atomic<int>> runs(kCount);
    std::mutex mutex;
    std::set<std::thread::id> threads;
    pool.run(kCount, [&](int64_t i) {
      runs[size_t(i)]++;
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    });
    for (int64_t i = 0; i < kCount; ++i) EXPECT_EQ(runs[size_t(i)].load(), 1) << i;
    EXPECT_LE(int64_t(threads.size()), kThreads);
  }
  pool.run(0, [](int64_t) { FAIL() << "no index to run"; });
  EXPECT_THROW(ThreadPool(0), std::invalid_argument);
}

TEST(ThreadPool, RethrowsTheErrorAfterEveryIndexFinished) {
  ThreadPool pool(4);
  std::atomic<int> finished{0};
  EXPECT_THROW(pool.run(64, [&](int64_t i) {
    if (i == 5) throw std::runtime_error("index 5");
    finished++;
  }), std::runtime_error);
  EXPECT_EQ(finished.load(), 63);
  pool.run(8, [&](int64_t) { finished++; });  // still usable
  EXPECT_EQ(finished.load(), 71);
}

TEST(ThreadPool, NestedAndConcurrentJobsComplete) {
  ThreadPool pool(3);
  std::atomic<int> inner{0};
  pool.run(6, [&](int64_t) { pool.run(5, [&](int64_t) { inner++; }); });
  EXPECT_EQ(inner.load(), 30);
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] { pool.run(50, [&](int64_t) { total++; }); });
  for (auto& caller : callers) caller.join();
  EXPECT_EQ(total.load(), 200);
}

// One call's inputs and outputs: a gated delta rule with diagonal decay, two sequences, four heads.
struct DeltaCase {
  static constexpr int64_t kBatch = 2, kLen = 37, kHeads = 4, kDk = 8, kDv = 6;
  static constexpr int64_t kTokens = kBatch * kLen * kHeads;
  RecurrenceKind kind{DecayClass::Diagonal, UpdateRule::Delta, Readout::Inclusive};
  RecurrenceShape shape{kBatch, kLen, kHeads, kDk, kDv, nullptr, kBatch};
  std::vector<float> q, k, v, g, beta, d_o;  // [B, T, H, dk|dv], g [B, T, H, dk], beta [B, T, H]

  DeltaCase() {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> unit(0.05f, 0.95f);
    auto fill = [&](std::vector<float>& x, int64_t n, auto& dist) {
      x.resize(size_t(n));
      for (float& e : x) e = dist(rng);
    };
    fill(q, kTokens * kDk, normal);
    fill(k, kTokens * kDk, normal);
    for (int64_t t = 0; t < kTokens; ++t) {  // unit-norm keys keep the delta rule stable
      float norm = 0.0f;
      for (int64_t c = 0; c < kDk; ++c) norm += k[size_t(t * kDk + c)] * k[size_t(t * kDk + c)];
      for (int64_t c = 0; c < kDk; ++c) k[size_t(t * kDk + c)] /= std::sqrt(norm);
    }
    fill(v, kTokens * kDv, normal);
    fill(g, kTokens * kDk, unit);
    for (float& e : g) e = std::log(e);
    fill(beta, kTokens, unit);
    fill(d_o, kTokens * kDv, normal);
  }

  // o, ht, d_q, d_k, d_v, d_g, d_beta concatenated.
  std::vector<float> outputs() const {
    std::vector<float> o(size_t(kTokens * kDv)), ht(size_t(kBatch * kHeads * kDk * kDv));
    RecurrenceForwardArgs fwd;
    fwd.q = q.data(), fwd.k = k.data(), fwd.v = v.data(), fwd.g = g.data(), fwd.beta = beta.data();
    fwd.scale = 0.5f, fwd.o = o.data(), fwd.ht = ht.data();
    chunkForward(kind, shape, fwd, DType::F32, /*chunk=*/16);
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), dg(g.size()), dbeta(beta.size());
    RecurrenceBackwardArgs bwd;
    bwd.fwd = fwd, bwd.d_o = d_o.data(), bwd.d_q = dq.data(), bwd.d_k = dk.data(), bwd.d_v = dv.data();
    bwd.d_g = dg.data(), bwd.d_beta = dbeta.data();
    chunkBackward(kind, shape, bwd, DType::F32, /*chunk=*/16);
    std::vector<float> all;
    for (const auto* part : {&o, &ht, &dq, &dk, &dv, &dg, &dbeta}) all.insert(all.end(), part->begin(), part->end());
    return all;
  }
};

TEST(ThreadPool, KernelResultsDoNotDependOnTheThreadCount) {
  const DeltaCase c;
  setCpuThreadCount(1);
  const std::vector<float> serial = c.outputs();
  for (int64_t threads : {2, 5}) {
    setCpuThreadCount(threads);
    EXPECT_EQ(cpuThreadPool()->size(), threads);
    EXPECT_EQ(c.outputs(), serial) << threads << " threads";  // bitwise
  }
  setCpuThreadCount(defaultThreadCount());
}

}  // namespace
}  // namespace linac::kernels::cpu
