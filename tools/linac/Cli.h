// The `linac` command line, through CLI11. Each subcommand lives in its own *Command.cpp, whose
// add<Name>Command(root) defines the subcommand and every option (name, default, one-line
// description: what `linac <command> --help` lists) and returns the function that runs it once
// the command line has parsed. main.cpp adds them all, parses, and reports errors:
//   exit 0 success, 1 the work failed, 2 a usage error (a bad flag or value, or a refusal).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace linac::cli {

/// A usage error found after parsing (a combination of flags, a refused run directory): exit 2.
class UsageError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A parsed subcommand: `run(argv)` does the work and returns the exit code (argv is the whole
/// command line, for commands that re-run themselves, as `train --nproc` does).
struct Command {
  CLI::App* app = nullptr;
  std::function<int(const std::vector<std::string>& argv)> run;
};

/// The devices `--device` accepts: "auto" is cuda when this process sees a CUDA device.
inline const std::vector<std::string>& deviceChoices() {
  static const std::vector<std::string> choices = {"cpu", "cuda", "auto"};
  return choices;
}

/// `--device cpu|cuda|auto` on `app`, bound to `device` (its value now is the default); every
/// other value is a usage error naming the flag.
CLI::Option* addDeviceOption(CLI::App& app, std::string& device);

/// "cpu" or "cuda": `device` with "auto" resolved.
std::string resolveDevice(const std::string& device, bool cudaAvailable);

/// Whether `--name` was given, on the command line or in a --config file.
bool given(const CLI::App& app, const std::string& name);

/// Splits "a,b,c" at `sep`; an empty part (",," or a trailing ",") is a usage error naming `flag`.
std::vector<std::string> splitList(const std::string& text, char sep, const std::string& flag);

/// `name` taking a comma-separated list of whole numbers into `values` (its value now is the
/// default shown by --help): an empty entry ("1,,2"), a partial number ("64x") or a value out of
/// int64 range is a usage error naming the flag.
CLI::Option* addIntListOption(CLI::App& app, const std::string& name, std::vector<int64_t>& values,
                              const std::string& description);

/// Reports a parse error on stderr (with a did-you-mean hint for an unknown command, flag or
/// config key) and returns its exit code: 0 for --help, 2 otherwise.
int reportParseError(const CLI::App& root, const CLI::ParseError& e);

}  // namespace linac::cli
