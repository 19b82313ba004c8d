// `linac`: the command researchers run. Each subcommand lives in its own *Command.cpp (Commands.h);
// this file adds them to one CLI11 app, parses, runs the one named and turns errors into exit
// codes: 0 success, 1 the work failed, 2 a usage error, 128 + signal for a run that was stopped.
#include "Commands.h"
#include "Version.h"

#include "linac/Spec/Diagnostic.h"

#include <iostream>

namespace {

using linac::cli::Command;

std::string footer() {
  std::string text =
      "Exit codes: 0 success, 1 the work failed, 2 usage error, 128 + signal stopped (130 Ctrl-C, 143 SIGTERM).\n"
      "Run 'linac COMMAND --help' for a command's options and their defaults.";
  if (!linac::cli::compilerAvailable())
    text += "\n(this build has no compiler: configure with MLIR 22 for `compile`)";
  if (!linac::cli::runtimeAvailable())
    text += "\n(this build has no runtime: install LibTorch for verify, bench, train, eval, generate, memory, sweep, import, export)";
  return text;
}

/// An unknown first word: a usage error with the closest command.
int unknownCommand(const CLI::App& root, const std::string& word) {
  std::vector<std::string> names = {"help", "version"};
  for (const CLI::App* sub : root.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  const std::string hint = linac::spec::closestMatch(word, names);
  std::cerr << "linac: error: unknown command '" << word << "'" << (hint.empty() ? "" : "; did you mean '" + hint + "'?")
            << "\nrun 'linac --help' for the commands\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App root{"linac: a compiler for hybrid linear-attention language models (YAML spec -> kernels -> "
                "training, evaluation, generation)",
                "linac"};
  root.footer(footer());
  root.require_subcommand(0, 1);
  // A flag given twice: the last value wins (a script appending flags overrides earlier ones).
  root.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  root.set_version_flag("--version", linac::cli::versionText(), "the version, the commit it was built from, the build's options");
  std::vector<Command> commands = {
      linac::cli::addCompileCommand(root), linac::cli::addEmitCommand(root),     linac::cli::addVerifyCommand(root),
      linac::cli::addBenchCommand(root),   linac::cli::addTrainCommand(root),    linac::cli::addEvalCommand(root),
      linac::cli::addGenerateCommand(root), linac::cli::addMemoryCommand(root), linac::cli::addSweepCommand(root),
      linac::cli::addImportCommand(root), linac::cli::addExportCommand(root), linac::cli::addAutotuneCommand(root),
  };
  if (argc < 2) {
    std::cerr << root.help();
    return 2;
  }
  const std::string first = argv[1];
  if (first == "help") {
    std::cout << root.help();
    return 0;
  }
  if (first == "version") {
    std::cout << linac::cli::versionText() << "\n";
    return 0;
  }
  if (first[0] != '-') {
    bool known = false;
    for (const Command& command : commands) known = known || command.app->get_name() == first;
    if (!known) return unknownCommand(root, first);
  }

  try {
    root.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return linac::cli::reportParseError(root, e);
  }
  const std::vector<std::string> args(argv, argv + argc);
  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    const std::string prefix = "linac " + command.app->get_name();
    try {
      return command.run(args);
    } catch (const linac::spec::SpecError& e) {
      std::cerr << e.what() << "\n";
      return 1;
    } catch (const CLI::ParseError& e) {  // a --config file's value that does not convert
      std::cerr << prefix << ": error: " << e.what() << "\n";
      return 2;
    } catch (const linac::cli::UsageError& e) {
      std::cerr << prefix << ": error: " << e.what() << "\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << prefix << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << root.help();  // options only (linac --something-valid-but-no-command)
  return 2;
}
