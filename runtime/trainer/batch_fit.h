// The largest micro-batch whose training step fits the device (`linac train --find-batch`): one
// optimizer step per trial batch (forward, loss, backward, gradient clipping and AdamW, the
// optimizer's state built anew as at a run's first step), doubling from 1 until a step runs out of
// memory or the cap is reached, then bisecting between the largest batch that fit and the
// smallest that did not.
#pragma once

#include "trainer/trainer.h"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace linac::trainer {

struct FitTrial {
  int64_t batch = 0;
  bool fits = false;
  double seconds = 0.0;              // the step's wall time, when it fit
  std::optional<int64_t> peakBytes;  // the step's device peak, when it fit (nullopt on the CPU)
};

struct BatchFit {
  std::vector<FitTrial> trials;  // in the order they ran
  int64_t largest = 0;           // 0: not even one sequence fits
  bool capped = false;           // the cap itself fit: the device may take more
};

/// `makeTrainer(b)` builds a trainer of config.batch b over `module`. Each trial's trainer is gone
/// before the next one is built, and after a trial that ran out of memory the module's gradients
/// are set to none and the allocator's cached blocks released, so every trial starts from the
/// model's parameters alone. Progress lines (one a trial) go to `progress` when non-null.
BatchFit findLargestBatch(const std::function<std::unique_ptr<Trainer>(int64_t batch)>& makeTrainer,
                          torch::nn::Module& module, const torch::Device& device, int64_t seqLen,
                          int64_t maxBatch, std::ostream* progress);

/// One trial as a progress line: "batch 8 x 4096 tokens: fits (peak 37.72 GiB, step 1.84 s)".
std::string describeTrial(const FitTrial& trial, int64_t seqLen);

/// The result: "largest batch that fits: 12 x 4096 = 49152 tokens a step, peak 61.20 GiB of
/// 139.80 GiB", or what to try when not even one sequence fits.
std::string describeFit(const BatchFit& fit, int64_t seqLen, const torch::Device& device,
                        std::optional<int64_t> deviceBytes);

}  // namespace linac::trainer
