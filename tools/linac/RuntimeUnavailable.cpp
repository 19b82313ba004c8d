// Stands in for the runtime commands in builds without LibTorch.
#include "Args.h"
#include "Commands.h"

namespace linac::cli {
namespace {

[[noreturn]] void noRuntime(const char* command) {
  throw UsageError(std::string("`") + command + "` needs the runtime, and this linac was built "
                   "without it (LibTorch not found); install torch==2.11.0 (tools/setup.sh) and reconfigure");
}

}  // namespace

bool runtimeAvailable() { return false; }
int runVerify(int, char**) { noRuntime("verify"); }
int runBench(int, char**) { noRuntime("bench"); }
int runTrain(int, char**) { noRuntime("train"); }
int runEval(int, char**) { noRuntime("eval"); }
int runGenerate(int, char**) { noRuntime("generate"); }
int runMemory(int, char**) { noRuntime("memory"); }
int runSweep(int, char**) { noRuntime("sweep"); }
int runImport(int, char**) { noRuntime("import"); }
int runExport(int, char**) { noRuntime("export"); }

}  // namespace linac::cli
