#include "trainer/batch_fit.h"

#include "trainer/device_memory.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <stdexcept>

namespace linac::trainer {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / kBytesPerGiB);
  return buf;
}

}  // namespace

std::string describeTrial(const FitTrial& trial, int64_t seqLen) {
  std::string line = "batch " + std::to_string(trial.batch) + " x " + std::to_string(seqLen) + " tokens: ";
  if (!trial.fits) return line + "out of memory";
  char step[32];
  std::snprintf(step, sizeof step, "step %.2f s", trial.seconds);
  return line + "fits (" + (trial.peakBytes ? "peak " + gib(*trial.peakBytes) + ", " : "") + step + ")";
}

std::string describeFit(const BatchFit& fit, int64_t seqLen, const torch::Device& device,
                        std::optional<int64_t> deviceBytes) {
  if (fit.largest == 0)
    return "not even one sequence of " + std::to_string(seqLen) + " tokens fits a training step on " + device.str() +
           " (try --checkpointing, a shorter --seq-len or a smaller preset)";
  std::string line = "largest batch that fits: " + std::to_string(fit.largest) + " x " + std::to_string(seqLen) +
                     " = " + std::to_string(fit.largest * seqLen) + " tokens a step";
  for (const FitTrial& t : fit.trials)
    if (t.batch == fit.largest && t.peakBytes)
      line += ", peak " + gib(*t.peakBytes) + (deviceBytes ? " of " + gib(*deviceBytes) : "");
  if (fit.capped) line += " (the --max-batch cap: the device may take more)";
  return line;
}

BatchFit findLargestBatch(const std::function<std::unique_ptr<Trainer>(int64_t batch)>& makeTrainer,
                          torch::nn::Module& module, const torch::Device& device, int64_t seqLen,
                          int64_t maxBatch, std::ostream* progress) {
  if (maxBatch < 1) throw std::invalid_argument("the largest batch to try must be >= 1, got " + std::to_string(maxBatch));
  BatchFit fit;
  auto trial = [&](int64_t batch) {
    FitTrial t;
    t.batch = batch;
    try {
      std::unique_ptr<Trainer> trainer = makeTrainer(batch);
      const Trainer::StepMeasurement m = trainer->measureStep();
      t.fits = true;
      t.seconds = m.seconds;
      t.peakBytes = m.peakBytes;
    } catch (const c10::OutOfMemoryError&) {
      t.fits = false;
      module.zero_grad(/*set_to_none=*/true);
    }
    releaseCachedMemory(device);
    fit.trials.push_back(t);
    if (progress != nullptr) *progress << describeTrial(t, seqLen) << std::endl;
    return t.fits;
  };
  // Doubling: lo the largest batch that fit so far, hi the smallest that did not (0: none yet).
  int64_t lo = 0, hi = 0;
  for (int64_t batch = 1; batch <= maxBatch; batch *= 2) {
    if (!trial(batch)) {
      hi = batch;
      break;
    }
    lo = batch;
    if (batch > maxBatch / 2) break;  // the next doubling passes the cap (or overflows)
  }
  if (hi == 0 && lo < maxBatch) {  // every power of two up to the cap fit: the cap itself
    if (trial(maxBatch)) lo = maxBatch;
    else hi = maxBatch;
  }
  fit.capped = hi == 0;
  while (hi - lo > 1) {  // bisection between a batch that fit and one that did not
    const int64_t mid = lo + (hi - lo) / 2;
    if (trial(mid)) lo = mid;
    else hi = mid;
  }
  fit.largest = lo;
  return fit;
}

}  // namespace linac::trainer
