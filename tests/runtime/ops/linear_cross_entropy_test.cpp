// ops::linearCrossEntropy (runtime/ops/linear_cross_entropy.h) against the unfused form, logits =
// hidden @ weight^T then torch's cross_entropy, in float64: the loss and both gradients, fp32
// tight and bf16 loose, token counts that the chunk does not divide, ignored targets (-100, what
// the trainer's MQAR batches carry), chunk-size independence, which gradients are computed, the
// incoming gradient's scale, argument errors, and the peak memory against the unfused form.
#include <gtest/gtest.h>

#include "ops/linear_cross_entropy.h"

#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string>

namespace linac::test {
namespace {

constexpr int64_t kIgnore = ops::kDefaultIgnoreIndex;

struct Problem {
  torch::Tensor hidden;   // [N, d]
  torch::Tensor weight;   // [V, d]
  torch::Tensor targets;  // [N] int64, kIgnore at every fifth token
};

Problem makeProblem(int64_t tokens, int64_t dim, int64_t vocab, torch::ScalarType dtype, uint64_t seed) {
  torch::manual_seed(seed);
  Problem p;
  p.hidden = torch::randn({tokens, dim}).to(dtype);
  p.weight = (torch::randn({vocab, dim}) * 0.5).to(dtype);
  p.targets = torch::randint(0, vocab, {tokens}, torch::kInt64);
  p.targets.slice(0, 0, tokens, 5).fill_(kIgnore);
  return p;
}

struct Result {
  torch::Tensor loss, gradHidden, gradWeight;  // float64
};

torch::Tensor leaf(const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); }

// The unfused form in float64 on the same (possibly bf16-rounded) input values.
Result reference(const Problem& p) {
  torch::Tensor h = leaf(p.hidden.to(torch::kFloat64)), w = leaf(p.weight.to(torch::kFloat64));
  torch::Tensor loss = torch::nn::functional::cross_entropy(
      torch::mm(h, w.t()), p.targets, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnore));
  loss.backward();
  return {loss.detach(), h.grad(), w.grad()};
}

Result fused(const Problem& p, int64_t chunkBytes) {
  torch::Tensor h = leaf(p.hidden), w = leaf(p.weight);
  torch::Tensor loss = ops::linearCrossEntropy(h, w, p.targets, {kIgnore, chunkBytes});
  EXPECT_EQ(loss.scalar_type(), torch::kFloat32);
  EXPECT_EQ(loss.dim(), 0);
  loss.backward();
  EXPECT_EQ(h.grad().scalar_type(), p.hidden.scalar_type());
  EXPECT_EQ(w.grad().scalar_type(), p.weight.scalar_type());
  return {loss.detach().to(torch::kFloat64), h.grad().to(torch::kFloat64), w.grad().to(torch::kFloat64)};
}

double relativeError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).norm().item<double>() / std::max(want.norm().item<double>(), 1e-30);
}

// Bytes for `tokens` tokens a chunk at `vocab` (the op's budget unit, see lossChunkTokens).
int64_t budgetFor(int64_t tokens, int64_t vocab) {
  int64_t bytes = tokens * vocab * 8;
  EXPECT_EQ(ops::lossChunkTokens(vocab, bytes), tokens);
  return bytes;
}

void expectMatchesReference(torch::ScalarType dtype, double tolerance) {
  constexpr int64_t kTokens = 37, kDim = 24, kVocab = 53, kChunk = 8;  // 37 = 4 chunks of 8 + 5
  Problem p = makeProblem(kTokens, kDim, kVocab, dtype, 1);
  Result want = reference(p);
  Result got = fused(p, budgetFor(kChunk, kVocab));
  EXPECT_LT(relativeError(got.loss, want.loss), tolerance) << got.loss.item<double>() << " vs " << want.loss.item<double>();
  EXPECT_LT(relativeError(got.gradHidden, want.gradHidden), tolerance);
  EXPECT_LT(relativeError(got.gradWeight, want.gradWeight), tolerance);
  // Ignored tokens get no gradient.
  EXPECT_EQ(got.gradHidden.slice(0, 0, kTokens, 5).abs().max().item<double>(), 0.0);
}

TEST(LinearCrossEntropy, Fp32MatchesUnfused) { expectMatchesReference(torch::kFloat32, 2e-6); }

// bf16 inputs, fp32 logits and accumulation: the gradients are rounded to bf16 on return.
TEST(LinearCrossEntropy, Bf16MatchesUnfused) { expectMatchesReference(torch::kBFloat16, 1e-2); }

TEST(LinearCrossEntropy, ChunkSizeDoesNotChangeTheResult) {
  Problem p = makeProblem(29, 16, 41, torch::kFloat32, 2);
  Result whole = fused(p, ops::kDefaultLossChunkBytes);  // one chunk
  for (int64_t tokens : {1, 3, 28}) {
    Result chunked = fused(p, budgetFor(tokens, 41));
    EXPECT_LT(relativeError(chunked.loss, whole.loss), 1e-6) << tokens;
    EXPECT_LT(relativeError(chunked.gradHidden, whole.gradHidden), 1e-6) << tokens;
    EXPECT_LT(relativeError(chunked.gradWeight, whole.gradWeight), 1e-6) << tokens;
  }
}

// The stored gradients are those of a loss of 1: backward scales them by the incoming gradient.
TEST(LinearCrossEntropy, BackwardScalesByTheIncomingGradient) {
  Problem p = makeProblem(11, 8, 13, torch::kFloat32, 3);
  Result once = fused(p, budgetFor(4, 13));
  torch::Tensor h = leaf(p.hidden), w = leaf(p.weight);
  (ops::linearCrossEntropy(h, w, p.targets, {kIgnore, budgetFor(4, 13)}) * -2.5).backward();
  EXPECT_TRUE(torch::allclose(h.grad().to(torch::kFloat64), once.gradHidden * -2.5, 1e-6, 1e-9));
  EXPECT_TRUE(torch::allclose(w.grad().to(torch::kFloat64), once.gradWeight * -2.5, 1e-6, 1e-9));
}

TEST(LinearCrossEntropy, ComputesOnlyTheWantedGradients) {
  Problem p = makeProblem(9, 8, 13, torch::kFloat32, 4);
  torch::Tensor h = leaf(p.hidden);
  torch::Tensor loss = ops::linearCrossEntropy(h, p.weight, p.targets);  // a frozen weight
  loss.backward();
  EXPECT_TRUE(h.grad().defined());
  EXPECT_FALSE(p.weight.grad().defined());
  torch::NoGradGuard noGrad;
  torch::Tensor evalLoss = ops::linearCrossEntropy(leaf(p.hidden), leaf(p.weight), p.targets);
  EXPECT_FALSE(evalLoss.requires_grad());
  EXPECT_NEAR(evalLoss.item<double>(), loss.item<double>(), 1e-7);
}

TEST(LinearCrossEntropy, RejectsBadArguments) {
  Problem p = makeProblem(9, 8, 13, torch::kFloat32, 5);
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { ops::linearCrossEntropy(p.hidden, p.weight, p.targets.to(torch::kInt32)); })
                .find("argument 'targets': expected dtype Long"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::linearCrossEntropy(p.hidden, p.weight.slice(1, 0, 4), p.targets); })
                .find("argument 'weight': expected shape [13, 8]"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::linearCrossEntropy(p.hidden, p.weight.to(torch::kBFloat16), p.targets); })
                .find("argument 'weight': expected dtype Float"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::linearCrossEntropy(p.hidden, p.weight, p.targets, {kIgnore, 0}); })
                .find("a positive memory budget"),
            std::string::npos);
}

// The process's resident-memory high-water mark in bytes (Linux: /proc/self/status VmHWM), and
// its reset (writing 5 to /proc/self/clear_refs); -1 where either is unavailable.
int64_t statusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field + ":", 0) == 0)
      return std::stoll(line.substr(field.size() + 1)) * 1024;  // "VmHWM:   123 kB"
  return -1;
}
bool resetPeak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  return bool(clear.flush());
}

// Forward + backward of a vocabulary-32,000 loss: the peak resident memory above the inputs,
// fused with a 16 MiB chunk budget and unfused (fp32 logits, log-softmax and their gradient).
TEST(LinearCrossEntropy, PeakMemoryStaysNearTheChunkBudget) {
  constexpr int64_t kTokens = 2048, kDim = 64, kVocab = 32000, kBudget = int64_t{16} << 20;
  Problem p = makeProblem(kTokens, kDim, kVocab, torch::kFloat32, 6);
  auto peakOf = [&](auto&& run) {
    torch::Tensor h = leaf(p.hidden), w = leaf(p.weight);
    if (!resetPeak()) return int64_t{-1};
    const int64_t before = statusBytes("VmRSS");
    run(h, w).backward();
    return statusBytes("VmHWM") - before;
  };
  const int64_t unfused = peakOf([&](const torch::Tensor& h, const torch::Tensor& w) {
    return torch::nn::functional::cross_entropy(torch::mm(h, w.t()), p.targets);
  });
  const int64_t fusedPeak = peakOf([&](const torch::Tensor& h, const torch::Tensor& w) {
    return ops::linearCrossEntropy(h, w, p.targets, {kIgnore, kBudget});
  });
  if (unfused < 0 || fusedPeak < 0) GTEST_SKIP() << "no /proc/self/clear_refs: peak memory is not measurable here";
  const int64_t logitsBytes = kTokens * kVocab * int64_t(sizeof(float));
  std::cout << "peak memory above the inputs, N " << kTokens << " d " << kDim << " V " << kVocab << ": unfused "
            << unfused / (1 << 20) << " MiB, fused " << fusedPeak / (1 << 20) << " MiB (logits alone "
            << logitsBytes / (1 << 20) << " MiB)" << std::endl;
  EXPECT_GT(unfused, 2 * logitsBytes);  // logits and their log-softmax at least
  EXPECT_LT(fusedPeak, logitsBytes / 2);
}

// --- on the GPU (label gpu): the chunk's loss and gradient in one kernel (cross_entropy.cu) ----

Problem onCuda(Problem p) {
  p.hidden = p.hidden.cuda(), p.weight = p.weight.cuda(), p.targets = p.targets.cuda();
  return p;
}

Result cpuResult(const Result& r) { return {r.loss.cpu(), r.gradHidden.cpu(), r.gradWeight.cpu()}; }

// The kernel path against the float64 unfused form: fp32 and bf16, a vocabulary on the 16-byte
// path (32,000, fla's) and one off it (53), chunks that leave a remainder, ignored tokens.
TEST(LinearCrossEntropyCuda, MatchesUnfused) {
  ASSERT_TRUE(torch::cuda::is_available()) << "LinearCrossEntropyCuda needs a GPU";
  struct Case {
    torch::ScalarType dtype;
    int64_t vocab;
    double tolerance;
  };
  for (const Case c : {Case{torch::kFloat32, 53, 2e-5}, Case{torch::kFloat32, 32000, 2e-5},
                       Case{torch::kBFloat16, 53, 1e-2}, Case{torch::kBFloat16, 32000, 1e-2}}) {
    const Problem p = makeProblem(37, 24, c.vocab, c.dtype, 7);
    const Result want = reference(p);
    const Result got = cpuResult(fused(onCuda(p), budgetFor(8, c.vocab)));
    const std::string what = std::string(c10::toString(c.dtype)) + " V " + std::to_string(c.vocab);
    EXPECT_LT(relativeError(got.loss, want.loss), c.tolerance) << what;
    EXPECT_LT(relativeError(got.gradHidden, want.gradHidden), c.tolerance) << what;
    EXPECT_LT(relativeError(got.gradWeight, want.gradWeight), c.tolerance) << what;
    EXPECT_EQ(got.gradHidden.slice(0, 0, 37, 5).abs().max().item<double>(), 0.0) << what;  // ignored tokens
  }
}

// Without gradients (evaluation) the kernel writes the loss alone, equal to the training pass's;
// a target outside the vocabulary makes the loss NaN instead of reading past the row.
TEST(LinearCrossEntropyCuda, LossWithoutGradientsAndBadTargets) {
  ASSERT_TRUE(torch::cuda::is_available()) << "LinearCrossEntropyCuda needs a GPU";
  const Problem p = onCuda(makeProblem(20, 16, 41, torch::kFloat32, 8));
  const double trained = fused(p, budgetFor(8, 41)).loss.item<double>();
  torch::NoGradGuard noGrad;
  EXPECT_NEAR(ops::linearCrossEntropy(p.hidden, p.weight, p.targets).item<double>(), trained, 1e-6);
  torch::Tensor bad = p.targets.clone();
  bad[3] = 41;
  EXPECT_TRUE(std::isnan(ops::linearCrossEntropy(p.hidden, p.weight, bad).item<double>()));
}

}  // namespace
}  // namespace linac::test
