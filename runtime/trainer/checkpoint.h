// Checkpoint files of the trainer. ckpt-<step>.pt is one LibTorch archive holding the model's
// parameters and buffers, the optimizer state, the step, the data stream's position, torch's
// generator states and the config; ckpt-<step>.json is its manifest: the payload's size and
// CRC-32C, plus the step, position, batch shape and config, so a resume can be checked before
// the payload is read. `latest` names the newest checkpoint. Internal to runtime/trainer.
#pragma once

#include "trainer/trainer.h"

#include <torch/torch.h>

#include <iosfwd>
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

/// Writes ckpt-<step>.pt and its manifest ckpt-<step>.json (each to NAME.tmp, fsynced, renamed;
/// the manifest first, so a payload is never newer than its manifest), then points `latest` at
/// it. A failed write (a full disk) removes its temporary file and throws TrainError saying so;
/// `latest` still names the previous checkpoint. Returns the checkpoint's path.
std::string writeCheckpoint(const std::string& outDir, const CheckpointInfo& info,
                            const torch::nn::Module& module, const torch::optim::Optimizer& optimizer);

/// The manifest of a checkpoint (ckpt-<step>.pt -> ckpt-<step>.json), without reading the
/// payload; throws TrainError when it is missing or unreadable.
CheckpointInfo readManifest(const std::string& checkpointPath);

/// Checks a checkpoint's bytes against its manifest (size and CRC-32C); returns the manifest's
/// info, or throws TrainError saying what is wrong ("checksum mismatch", "truncated", ...).
CheckpointInfo verifyCheckpoint(const std::string& checkpointPath);

/// The path `outDir/latest` names, or nullopt when there is no `latest`.
std::optional<std::string> latestCheckpoint(const std::string& outDir);

struct IntactCheckpoint {
  std::string path;
  CheckpointInfo info;
};

/// The newest checkpoint that passes verifyCheckpoint, from the one `latest` names (the highest
/// step when there is no `latest`) down by step; each one skipped is reported on `notices` (may
/// be null). nullopt when the directory holds no checkpoint; throws TrainError listing what is
/// wrong with each when none is intact.
std::optional<IntactCheckpoint> findIntactCheckpoint(const std::string& outDir, std::ostream* notices);

/// Loads a checkpoint into `module` and `optimizer` (tensors onto `device`) and restores torch's
/// CPU and CUDA generator states; the caller has verified it. Throws TrainError naming the path.
CheckpointInfo readCheckpoint(const std::string& path, torch::nn::Module& module,
                              torch::optim::Optimizer& optimizer, const torch::Device& device);

/// Deletes the checkpoints (payload and manifest) of steps after `currentStep` (left behind by a
/// run that resumed from an earlier one), manifests without a payload, and all but the `keep`
/// newest others (keep <= 0: none).
void pruneCheckpoints(const std::string& outDir, int64_t keep, int64_t currentStep);

/// The step of a checkpoint file name "ckpt-<step>.pt" / "ckpt-<step>.json", nullopt otherwise.
std::optional<int64_t> checkpointStep(const std::string& fileName);

}  // namespace linac::trainer::detail
