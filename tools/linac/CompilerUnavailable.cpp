// Stands in for CompileCommand.cpp in builds without MLIR (the GPU machine): the command exists
// and says plainly why it cannot run.
#include "Args.h"
#include "Commands.h"

namespace linac::cli {

bool compilerAvailable() { return false; }

int runCompile(int, char**) {
  throw UsageError("this linac was built without the compiler (MLIR 22 not found); "
                   "use generated/ or rebuild with -DLINAC_ENABLE_COMPILER=ON");
}

}  // namespace linac::cli
