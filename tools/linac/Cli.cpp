#include "Cli.h"

#include "linac/Spec/Diagnostic.h"

#include <iostream>

namespace linac::cli {
namespace {

/// Every name `app` accepts as an option, with its dashes ("--lr", "-h").
std::vector<std::string> optionNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
    for (const auto& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

/// "unknown option '--lrr'; did you mean '--lr'?" for the first unexpected argument that looks
/// like an option of `app`, "" when none does.
std::string unknownOption(const CLI::App& app, const std::vector<std::string>& unexpected) {
  for (const auto& arg : unexpected) {
    if (arg.size() < 2 || arg[0] != '-') continue;
    const std::string name = arg.substr(0, arg.find('='));
    const std::string hint = spec::closestMatch(name, optionNames(app));
    return "unknown option '" + name + "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?");
  }
  return "";
}

}  // namespace

CLI::Option* addDeviceOption(CLI::App& app, std::string& device) {
  return app.add_option("--device", device, "where the model or kernels run: cpu, cuda, or auto (cuda when available)")
      ->check(CLI::IsMember(deviceChoices()))
      ->capture_default_str();
}

std::string resolveDevice(const std::string& device, bool cudaAvailable) {
  if (device == "auto") return cudaAvailable ? "cuda" : "cpu";
  if (device != "cpu" && device != "cuda") throw UsageError("--device must be cpu, cuda or auto, got '" + device + "'");
  return device;
}

bool given(const CLI::App& app, const std::string& name) {
  const CLI::Option* opt = app.get_option_no_throw("--" + name);
  if (!opt) throw std::logic_error("linac " + app.get_name() + " has no option --" + name);
  return opt->count() > 0;
}

std::vector<std::string> splitList(const std::string& text, char sep, const std::string& flag) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    const std::string part = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty())
      throw UsageError(flag + ": empty entry in '" + text + "' (a list separated by '" + std::string(1, sep) + "')");
    parts.push_back(part);
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

CLI::Option* addIntListOption(CLI::App& app, const std::string& name, std::vector<int64_t>& values,
                              const std::string& description) {
  std::string shown;
  for (int64_t v : values) shown += (shown.empty() ? "" : ",") + std::to_string(v);
  CLI::Option* option = app.add_option_function<std::string>(
      name,
      [&values, name](const std::string& text) {
        std::vector<int64_t> parsed;
        try {
          for (const std::string& part : splitList(text, ',', name)) {
            size_t used = 0;
            const long long v = std::stoll(part, &used);
            if (used != part.size()) throw std::invalid_argument(part);
            parsed.push_back(v);
          }
        } catch (const UsageError& e) {  // splitList's message, without its "--flag: " (CLI11 adds it)
          const std::string message = e.what();
          throw CLI::ValidationError(name, message.substr(message.rfind(name + ": ", 0) == 0 ? name.size() + 2 : 0));
        } catch (const std::logic_error&) {  // std::stoll's invalid_argument / out_of_range
          throw CLI::ValidationError(name, "'" + text + "' is not a comma-separated list of whole numbers");
        }
        values = std::move(parsed);
      },
      description);
  return option->type_name("N,...")->default_str(shown);
}

int reportParseError(const CLI::App& root, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {  // --help
    return root.exit(e);
  }
  // The subcommand the error belongs to: the one the command line named, if any.
  const CLI::App* app = &root;
  if (const auto subs = root.get_subcommands(); !subs.empty()) app = subs.front();
  const std::string prefix = app == &root ? "linac" : "linac " + app->get_name();
  std::string message = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    const std::vector<std::string> unexpected = root.remaining(true);  // the subcommand's too
    if (const std::string unknown = unknownOption(*app, unexpected); !unknown.empty()) message = unknown;
  }
  std::cerr << prefix << ": error: " << message << "\n"
            << "run '" << prefix << " --help' for its options\n";
  return 2;
}

}  // namespace linac::cli
