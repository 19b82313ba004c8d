// `linac --version`: the version, the commit the binary was built from and the build's options.
#pragma once

#include <string>

namespace linac::cli {

/// "linac 0.1.0 (commit 1f072c9a0b1c, compiler on, runtime on, cuda off)".
std::string versionText();

}  // namespace linac::cli
