#include "registry/layer.h"

#include <cmath>
#include <stdexcept>

namespace linac::runtime {
namespace {
// expand * hidden must be a whole number; allow for the rounding of decimal ratios like 0.1.
constexpr double kWholeTolerance = 1e-6;
}  // namespace

int64_t DimRule::resolve(int64_t hidden, int64_t heads) const {
  if (heads <= 0) throw std::invalid_argument("layer: heads must be positive, got " + std::to_string(heads));
  if (absolute > 0) return absolute;
  const double total = expand * static_cast<double>(hidden);
  const double rounded = std::round(total);
  if (!(expand > 0) || !std::isfinite(total) || std::fabs(total - rounded) > kWholeTolerance || rounded < 1)
    throw std::invalid_argument("layer: expand " + std::to_string(expand) + " * hidden " + std::to_string(hidden) +
                                " is not a positive whole number");
  const auto whole = static_cast<int64_t>(rounded);
  if (whole % heads != 0)
    throw std::invalid_argument("layer: expand " + std::to_string(expand) + " * hidden " + std::to_string(hidden) +
                                " = " + std::to_string(whole) + " is not divisible by " + std::to_string(heads) +
                                " heads");
  return whole / heads;
}

}  // namespace linac::runtime
