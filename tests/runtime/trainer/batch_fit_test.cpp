// trainer/batch_fit.h over the trainer tests' tiny model: the search's trials (doubling, then
// bisection between the largest batch that fit and the smallest that did not) and what a trial
// leaves behind. A CPU step never runs out of memory, so the device's limit is played by the
// trainer factory, which throws c10::OutOfMemoryError above a given batch as CUDA's allocator does.
#include "test_support.h"

#include "trainer/batch_fit.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

namespace linac::trainer::test {
namespace {

struct Fixture {
  TinyLM model{TinyLM(0.0)};
  VectorStream stream{learnableTokens(4096, 3), kSeqLen, 5};
  TrainConfig config = tinyConfig(freshDir("batch-fit"));

  /// Real trainers up to `limit`; above it, the allocator's error before the step runs.
  std::function<std::unique_ptr<Trainer>(int64_t)> factory(int64_t limit) {
    return [this, limit](int64_t batch) -> std::unique_ptr<Trainer> {
      if (batch > limit) throw c10::OutOfMemoryError({__func__, __FILE__, uint32_t(__LINE__)}, "CUDA out of memory");
      TrainConfig c = config;
      c.batch = batch;
      return std::make_unique<Trainer>(c, model.ptr(), [this](const torch::Tensor& t) { return model->forward(t); },
                                       stream);
    };
  }
};

std::vector<int64_t> batches(const BatchFit& fit) {
  std::vector<int64_t> b;
  for (const FitTrial& t : fit.trials) b.push_back(t.batch);
  return b;
}

TEST(BatchFit, DoublesThenBisectsToTheLargestBatchThatFits) {
  Fixture f;
  const BatchFit fit = findLargestBatch(f.factory(5), *f.model, torch::kCPU, kSeqLen, 64, nullptr);
  EXPECT_EQ(batches(fit), (std::vector<int64_t>{1, 2, 4, 8, 6, 5}));
  EXPECT_EQ(fit.largest, 5);
  EXPECT_FALSE(fit.capped);
  for (const FitTrial& t : fit.trials) {
    EXPECT_EQ(t.fits, t.batch <= 5) << t.batch;
    EXPECT_FALSE(t.peakBytes.has_value());  // the CPU has no allocator peak
    if (t.fits) EXPECT_GT(t.seconds, 0.0);
  }
}

TEST(BatchFit, TriesTheCapWhenEveryPowerOfTwoBelowItFits) {
  Fixture f;
  const BatchFit fit = findLargestBatch(f.factory(1000), *f.model, torch::kCPU, kSeqLen, 6, nullptr);
  EXPECT_EQ(batches(fit), (std::vector<int64_t>{1, 2, 4, 6}));
  EXPECT_EQ(fit.largest, 6);
  EXPECT_TRUE(fit.capped);
  const BatchFit capAlone = findLargestBatch(f.factory(1000), *f.model, torch::kCPU, kSeqLen, 1, nullptr);
  EXPECT_EQ(batches(capAlone), (std::vector<int64_t>{1}));
  EXPECT_TRUE(capAlone.capped);
}

TEST(BatchFit, ReportsNothingFitsAndWhatToTry) {
  Fixture f;
  const BatchFit fit = findLargestBatch(f.factory(0), *f.model, torch::kCPU, kSeqLen, 64, nullptr);
  EXPECT_EQ(batches(fit), (std::vector<int64_t>{1}));
  EXPECT_EQ(fit.largest, 0);
  EXPECT_NE(describeFit(fit, kSeqLen, torch::kCPU, std::nullopt).find("not even one sequence"), std::string::npos);
}

TEST(BatchFit, AStepUpdatesTheModelButWritesNoRun) {
  Fixture f;
  const torch::Tensor before = f.model->head->weight.detach().clone();
  const BatchFit fit = findLargestBatch(f.factory(1000), *f.model, torch::kCPU, kSeqLen, 1, nullptr);
  ASSERT_EQ(fit.largest, 1);
  EXPECT_FALSE(torch::equal(before, f.model->head->weight.detach()));  // a real optimizer step ran
  EXPECT_FALSE(std::filesystem::exists(f.config.outDir));
}

}  // namespace
}  // namespace linac::trainer::test
