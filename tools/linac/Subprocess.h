// Child processes for `linac sweep`: each cell's `linac train` and `linac eval` run as separate
// processes (a crash or an out-of-memory in one cell cannot take the sweep down), their output
// going to a log file in the cell's folder. SIGINT, SIGTERM and SIGHUP sent to the sweep are
// passed on to the running child, and the sweep stops after it.
#pragma once

#include <string>
#include <vector>

namespace linac::cli {

/// How a child process ended.
struct ChildExit {
  int code = 0;         // exit status, or 128 + signal when a signal ended it
  int stopSignal = 0;   // the signal the sweep itself received while the child ran (0: none)
};

/// Runs `argv` (argv[0] a path) to completion with stdout and stderr appended to `logPath`.
/// Throws std::runtime_error when the process cannot be started.
ChildExit runLogged(const std::vector<std::string>& argv, const std::string& logPath);

/// The running executable's own path (/proc/self/exe), to start `linac train` / `linac eval`.
std::string selfExecutable();

/// The signal that asked the sweep to stop, 0 if none (set by runLogged's handlers).
int stopRequested();

}  // namespace linac::cli
