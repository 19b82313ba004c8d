// Which checkpoint a command that reads a trained model (`eval`, `generate`) loads: a run
// directory's newest intact checkpoint (a damaged one is skipped, saying so), or a named one.
#pragma once

#include <ostream>
#include <string>

namespace linac::cli {

struct RunCheckpoint {
  std::string dir;   // the run directory (model.json, inputs/, config.json)
  std::string ckpt;  // the checkpoint file
  /// The checkpoint's file name, without the directory.
  std::string fileName() const;
};

/// `path` is a run directory or a ckpt-*.pt file inside one; notices about skipped damaged
/// checkpoints go to `notices`.
RunCheckpoint resolveCheckpoint(const std::string& path, std::ostream& notices);

}  // namespace linac::cli
