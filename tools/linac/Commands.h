// Entry points of the `linac` subcommands; each returns the process exit code and throws
// UsageError / spec::SpecError / std::exception for main() to report.
#pragma once

namespace linac::cli {

bool compilerAvailable();
int runCompile(int argc, char** argv);
int runEmit(int argc, char** argv);

bool runtimeAvailable();
int runVerify(int argc, char** argv);
int runBench(int argc, char** argv);
int runTrain(int argc, char** argv);
int runEval(int argc, char** argv);
int runGenerate(int argc, char** argv);
int runMemory(int argc, char** argv);
int runSweep(int argc, char** argv);
int runImport(int argc, char** argv);
int runExport(int argc, char** argv);

}  // namespace linac::cli
