// A small command-line parser for the `linac` subcommands: positional arguments and
// `--name value` / `--name=value` / boolean `--flag`. Unknown flags are errors with a suggestion.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace linac::cli {

class UsageError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // --name value
  std::set<std::string> flags;                // --flag

  bool has(const std::string& flag) const { return flags.count(flag) || values.count(flag); }
  std::string get(const std::string& name, const std::string& fallback) const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }
  long long getInt(const std::string& name, long long fallback) const;
};

/// Parses argv[first..]. `valued` names options that take a value, `booleans` plain flags.
Args parseArgs(int argc, char** argv, int first, const std::set<std::string>& valued,
               const std::set<std::string>& booleans);

}  // namespace linac::cli
