#include "YamlConfig.h"

#include "Cli.h"

#include "linac/Spec/Diagnostic.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <sstream>

namespace linac::cli {
namespace {

/// The options a config file may set, by key: long names, and positionals by lower-case name.
std::map<std::string, CLI::Option*> configurableOptions(CLI::App& app) {
  std::map<std::string, CLI::Option*> byKey;
  const CLI::Option* help = app.get_help_ptr();
  for (CLI::Option* opt : app.get_options()) {
    if (opt == help || opt->check_lname("config")) continue;
    for (const auto& l : opt->get_lnames()) byKey[l] = opt;
    if (opt->get_positional()) {
      std::string key = opt->get_name(true);
      std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return char(std::tolower(c)); });
      byKey[key] = opt;
    }
  }
  return byKey;
}

/// The key of `opt` in a config file.
std::string configKey(const CLI::Option* opt) {
  if (!opt->get_lnames().empty()) return opt->get_lnames().front();
  std::string key = opt->get_name(true);
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return key;
}

}  // namespace

void applyYamlConfig(CLI::App& app, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw UsageError("--config: cannot read " + path);
  } catch (const YAML::Exception& e) {
    throw UsageError(path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap())
    throw UsageError(path + ": a config file is a YAML map of flag names to values (lr: 1e-3)");
  const auto options = configurableOptions(app);
  std::vector<std::string> keys;
  for (const auto& [key, _] : options) keys.push_back(key);
  for (const auto& entry : root) {
    const std::string key = entry.first.Scalar();
    const std::string where = path + ":" + std::to_string(entry.first.Mark().line + 1) + ": ";
    auto it = options.find(key);
    if (it == options.end()) {
      const std::string hint = spec::closestMatch(key, keys);
      throw UsageError(where + "unknown key '" + key + "' for linac " + app.get_name() +
                       (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                       " (keys are the long flag names without dashes)");
    }
    CLI::Option* opt = it->second;
    const YAML::Node& value = entry.second;
    if (value.IsNull() || opt->count() > 0) continue;  // unset here, or the command line's value wins
    std::vector<std::string> inputs;
    if (value.IsScalar()) inputs.push_back(value.Scalar());
    else if (value.IsSequence())
      for (const auto& item : value) {
        if (!item.IsScalar()) throw UsageError(where + key + ": a list of plain values expected");
        inputs.push_back(item.Scalar());
      }
    else throw UsageError(where + key + ": a value or a list of values expected, not a map");
    try {
      for (const auto& input : inputs) opt->add_result(input);
      opt->run_callback();
    } catch (const CLI::ParseError& e) {
      throw UsageError(where + key + ": " + e.what());
    }
  }
}

std::string resolvedConfigYaml(const CLI::App& app,
                               const std::map<std::string, std::optional<std::string>>& effective,
                               const std::string& header) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  const CLI::Option* help = app.get_help_ptr();
  for (const CLI::Option* opt : app.get_options()) {
    if (opt == help || opt->check_lname("config")) continue;
    const std::string key = configKey(opt);
    out << YAML::Key << key << YAML::Value;
    if (auto it = effective.find(key); it != effective.end()) {
      if (it->second) out << *it->second;
      else out << YAML::Null;
    } else if (opt->get_expected_max() == 0) {  // a flag
      out << (opt->count() > 0 && opt->as<bool>() ? "true" : "false");
    } else if (opt->count() > 0) {
      const auto& results = opt->results();
      if (results.size() == 1) out << results.front();
      else {
        out << YAML::Flow << YAML::BeginSeq;
        for (const auto& r : results) out << r;
        out << YAML::EndSeq;
      }
    } else if (!opt->get_default_str().empty()) {
      out << opt->get_default_str();
    } else {
      out << YAML::Null;
    }
  }
  out << YAML::EndMap;
  std::ostringstream text;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) text << "# " << line << "\n";
  text << out.c_str() << "\n";
  return text.str();
}

std::optional<std::string> configValue(const std::string& path, const std::string& key) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return std::nullopt;
  } catch (const YAML::Exception& e) {
    throw UsageError(path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) throw UsageError(path + ": a YAML map of flag names to values expected");
  const YAML::Node value = root[key];
  if (!value || value.IsNull() || !value.IsScalar()) return std::nullopt;
  return value.Scalar();
}

}  // namespace linac::cli
