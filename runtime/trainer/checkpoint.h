// Checkpoint files of the trainer: one LibTorch archive per checkpoint holding the model's
// parameters and buffers, the optimizer state, the step, the data stream's position, torch's
// generator states and the config. Internal to runtime/trainer; the Trainer calls these.
#pragma once

#include "trainer/trainer.h"

#include <torch/torch.h>

#include <optional>
#include <string>

namespace linac::trainer::detail {

/// The non-tensor part of a checkpoint.
struct CheckpointInfo {
  int64_t step = 0;
  int64_t dataPosition = 0;
  int64_t batch = 0;         // recorded so a resume with a different batch shape is refused
  int64_t accumulation = 0;
  int64_t seqLen = 0;
  std::string configJson;
};

/// Writes outDir/ckpt.tmp, renames it to outDir/ckpt-<step>.pt, then points outDir/latest at it
/// (written to latest.tmp, renamed). Each file is fsynced before its rename, so after a crash
/// `latest` names either the previous complete checkpoint or this one, never a partial file.
/// Returns the checkpoint's path.
std::string writeCheckpoint(const std::string& outDir, const CheckpointInfo& info,
                            const torch::nn::Module& module, const torch::optim::Optimizer& optimizer);

/// The path `outDir/latest` names, or nullopt when there is no `latest`.
std::optional<std::string> latestCheckpoint(const std::string& outDir);

/// Loads a checkpoint into `module` and `optimizer` (tensors onto `device`) and restores torch's
/// CPU and CUDA generator states. Throws TrainError naming the path on any failure.
CheckpointInfo readCheckpoint(const std::string& path, torch::nn::Module& module,
                              torch::optim::Optimizer& optimizer, const torch::Device& device);

/// Deletes all but the `keep` newest ckpt-<step>.pt files in outDir (keep <= 0: none deleted).
void pruneCheckpoints(const std::string& outDir, int64_t keep);

}  // namespace linac::trainer::detail
