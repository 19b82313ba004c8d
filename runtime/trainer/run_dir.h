// The run directory (TrainConfig::outDir) belongs to one run:
//   lock                  flock'd by the process training in it, which writes its PID there
//   model.json, inputs/   the caller's run files (RunFile): what is trained, copies of its inputs
//   config.yaml           (`linac train`'s run file) every flag's value at the latest start
//   config.json           the TrainConfig of the latest start
//   metrics.jsonl         one JSON object per logged step / evaluation
//   ckpt-<step>.pt        checkpoints (the newest keepCheckpoints), each with its manifest
//   ckpt-<step>.json      (size, CRC-32C, step, config), and `latest` naming the newest
// Every file is replaced by rename after an fsync, never rewritten in place (file_io.h).
//
// What Trainer::run checks before it touches anything there:
//  - the lock: a second process on the same directory is refused, naming the holder's PID;
//  - a fresh start needs an empty directory, or overwrite (which removes only what linac
//    writes, and refuses a directory holding anything else);
//  - a resume continues from the newest intact checkpoint and compares the run's identity run
//    files and its config with this start's: the model and the batch shape may not change, the
//    optimization (lr, warmup, seed, data, ...) only with acceptChanges, and the rest (more
//    steps, logging and evaluation intervals, the device) is accepted with a note. The learning
//    rate schedule keeps its length, so more steps continue at the floor lr.
// A resume with no checkpoint yet is a fresh start (of the same run, when model.json is there).
#pragma once

#include "trainer/trainer.h"

#include <string>
#include <vector>

namespace linac::trainer {

/// A start the run directory refuses until the user says otherwise (--resume, --overwrite,
/// --accept-changes): the message lists every reason.
class RunRefused : public TrainError {
public:
  using TrainError::TrainError;
};

/// An exclusive flock on DIR/lock (DIR is created) for the object's lifetime, with this
/// process's PID written in the file. Within one process the lock is shared: a RunLock on a
/// directory this process already holds (`linac train` takes it early, Trainer::run again)
/// reuses it. Throws TrainError naming the holder's PID when another process holds it.
class RunLock {
public:
  explicit RunLock(const std::string& dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

private:
  std::string key_;
};

/// One difference between a run's stored config and a resume's.
struct ConfigChange {
  enum class Kind { Safe, NeedsAccept, Refused };
  Kind kind;
  std::string field;  // as in config.json: "lr", "steps", ...
  std::string stored, resumed;
  std::string note;   // what the change means, for Safe ones ("" otherwise)
};
std::vector<ConfigChange> compareConfigs(const TrainConfig& stored, const TrainConfig& resumed);

/// How the identity run files differ from what `dir` holds, one line each: for a JSON object the
/// differing fields ("model.json: preset.hidden is 128 in the run, 256 now"), else the file.
std::vector<std::string> compareRunFiles(const std::string& dir, const std::vector<RunFile>& files);

/// The checks Trainer::run makes before touching the run directory, for a caller that wants to
/// fail before loading data and building a model (it holds the RunLock). A resume is checked
/// against the newest checkpoint's manifest, whose payload run() verifies later. Throws
/// RunRefused listing every reason; returns the notes of the accepted changes.
std::vector<std::string> checkRunDirectory(const TrainConfig& config, const std::vector<RunFile>& files);

namespace detail {

struct CheckpointInfo;

/// checkRunDirectory's checks against `resumeFrom` (the checkpoint a resume continues from;
/// null for a fresh start).
std::vector<std::string> checkStart(const TrainConfig& config, const std::vector<RunFile>& files,
                                    const CheckpointInfo* resumeFrom);

/// For a fresh start that passed checkStart: empties the directory (but its lock), then writes
/// the run files.
void prepareFreshStart(const std::string& dir, const std::vector<RunFile>& files);

/// Deletes the *.tmp files a killed process left behind, in the directory and in the run files'
/// folders (the caller holds the lock).
void removeStaleTemporaries(const std::string& dir, const std::vector<RunFile>& files);

}  // namespace detail
}  // namespace linac::trainer
