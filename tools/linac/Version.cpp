#include "Version.h"

#include "build_info.h"  // LINAC_GIT_COMMIT, written at build time (cmake/BuildInfo.cmake)

namespace linac::cli {

std::string versionText() {
  // LINAC_VERSION and LINAC_BUILD_OPTIONS come from tools/linac/CMakeLists.txt.
  return std::string("linac ") + LINAC_VERSION + " (commit " + LINAC_GIT_COMMIT + ", " + LINAC_BUILD_OPTIONS + ")";
}

}  // namespace linac::cli
