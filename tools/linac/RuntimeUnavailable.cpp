// Stands in for the runtime commands in builds without LibTorch: each command exists and says
// plainly why it cannot run.
#include "Commands.h"

namespace linac::cli {
namespace {

Command unavailable(CLI::App& root, const std::string& name) {
  CLI::App* app = root.add_subcommand(name, "(not in this build: it has no runtime)");
  app->allow_extras();
  return {app, [name](const std::vector<std::string>&) -> int {
            throw UsageError("`" + name + "` needs the runtime, and this linac was built without it (LibTorch "
                             "not found); install torch==2.11.0 (tools/setup.sh) and reconfigure");
          }};
}

}  // namespace

bool runtimeAvailable() { return false; }
Command addVerifyCommand(CLI::App& root) { return unavailable(root, "verify"); }
Command addBenchCommand(CLI::App& root) { return unavailable(root, "bench"); }
Command addTrainCommand(CLI::App& root) { return unavailable(root, "train"); }
Command addEvalCommand(CLI::App& root) { return unavailable(root, "eval"); }
Command addGenerateCommand(CLI::App& root) { return unavailable(root, "generate"); }
Command addMemoryCommand(CLI::App& root) { return unavailable(root, "memory"); }
Command addSweepCommand(CLI::App& root) { return unavailable(root, "sweep"); }
Command addImportCommand(CLI::App& root) { return unavailable(root, "import"); }
Command addExportCommand(CLI::App& root) { return unavailable(root, "export"); }

}  // namespace linac::cli
