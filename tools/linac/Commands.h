// The `linac` subcommands: each add<Name>Command (in <Name>Command.cpp) adds the subcommand with
// its options to `root` and returns how to run it (Cli.h). Which ones can run depends on the
// build: the compiler needs MLIR, the runtime commands LibTorch (without them, stand-ins that say
// why: CompilerUnavailable.cpp, RuntimeUnavailable.cpp).
#pragma once

#include "Cli.h"

namespace linac::cli {

bool compilerAvailable();
Command addCompileCommand(CLI::App& root);
Command addEmitCommand(CLI::App& root);
Command addAutotuneCommand(CLI::App& root);

bool runtimeAvailable();
Command addVerifyCommand(CLI::App& root);
Command addBenchCommand(CLI::App& root);
Command addTrainCommand(CLI::App& root);
Command addEvalCommand(CLI::App& root);
Command addGenerateCommand(CLI::App& root);
Command addMemoryCommand(CLI::App& root);
Command addSweepCommand(CLI::App& root);
Command addImportCommand(CLI::App& root);
Command addExportCommand(CLI::App& root);

}  // namespace linac::cli
