// Stands in for CompileCommand.cpp in builds without MLIR (the GPU machine): the command exists
// and says plainly why it cannot run.
#include "Commands.h"

namespace linac::cli {

bool compilerAvailable() { return false; }

Command addCompileCommand(CLI::App& root) {
  CLI::App* app = root.add_subcommand("compile", "compile a spec (not in this build: it has no MLIR)");
  app->allow_extras();
  return {app, [](const std::vector<std::string>&) -> int {
            throw UsageError("this linac was built without the compiler (MLIR 22 not found); "
                             "use generated/ or rebuild with -DLINAC_ENABLE_COMPILER=ON");
          }};
}

}  // namespace linac::cli
