// A command's flags from a YAML file (`linac train --config run.yaml`), and the resolved flags
// written back as such a file (the run directory's config.yaml). The file is a map from the
// long flag names without dashes (and a positional's lower-case name, e.g. `spec`) to values:
//   spec: specs/gated_deltanet.yaml
//   preset: tiny
//   lr: 1e-3
//   no-overlap: true
// A list value is a YAML sequence or the flag's own comma-separated text; `~` leaves a flag unset.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <optional>
#include <string>

namespace linac::cli {

/// Sets each option of `app` that the command line left unset from the YAML file `path`,
/// converted and validated as the command line's values are. An unknown key, a value that does
/// not convert or a file that is not a YAML map is a UsageError naming the file, line and key
/// (with a did-you-mean for a misspelled key).
void applyYamlConfig(CLI::App& app, const std::string& path);

/// `app`'s every option (but --help and --config) as YAML, in the order of `--help`: the value
/// in `effective` for each flag it names (the value the command actually used; nullopt: unused,
/// written `~`), else the value given, else the default; `~` for an unset flag without default. `header` is written
/// first as comment lines. applyYamlConfig reads the result back.
std::string resolvedConfigYaml(const CLI::App& app,
                               const std::map<std::string, std::optional<std::string>>& effective,
                               const std::string& header);

/// The value of `key` in the YAML map file `path` (e.g. a run directory's config.yaml) as text, or
/// nullopt when the file, the key or a value is missing (`~`). Throws a UsageError naming the
/// file when it exists but is not a YAML map.
std::optional<std::string> configValue(const std::string& path, const std::string& key);

}  // namespace linac::cli
