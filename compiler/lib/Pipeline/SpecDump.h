// `--emit=spec`: a normalised print of a parsed spec.
#pragma once

#include "linac/Spec/Spec.h"

#include <string>

namespace linac::pipeline {

std::string dumpSpec(const spec::VariantSpec& v);

}  // namespace linac::pipeline
