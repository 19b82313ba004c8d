// Stands in for the runtime commands in builds without LibTorch.
#include "Args.h"
#include "Commands.h"

namespace linac::cli {

bool runtimeAvailable() { return false; }

int runVerify(int, char**) {
  throw UsageError("this linac was built without the runtime (LibTorch not found); "
                   "install torch==2.11.0 (tools/setup.sh) and reconfigure");
}

}  // namespace linac::cli
