// DimSpec::resolve: a per-head size from an absolute size or a ratio of the model width.
#include "Internal.h"
#include "linac/Spec/Limits.h"

#include <fmt/format.h>

#include <cmath>

namespace linac::spec {
namespace {
// expand * hidden must be a whole number; allow for the rounding of decimal ratios like 0.1.
constexpr double kWholeTolerance = 1e-6;
// No layer is wider than this; the bound also keeps the conversion to int64_t defined.
constexpr double kMaxTotal = double(int64_t(1) << 30);
}  // namespace

int64_t DimSpec::resolve(int64_t hidden, int64_t heads) const {
  if (heads <= 0) throw SpecError(loc, fmt::format("heads must be positive, got {}", heads));
  if (absolute > 0) return absolute;
  if (!(expand > 0)) throw SpecError(loc, "dimension is not set: give a per-head size or {expand: ratio}");
  if (hidden <= 0) throw SpecError(loc, fmt::format("hidden size must be positive, got {}", hidden));
  const double total = expand * static_cast<double>(hidden);
  const double rounded = std::round(total);
  if (!std::isfinite(total) || std::fabs(total - rounded) > kWholeTolerance || rounded < 1 || rounded > kMaxTotal)
    throw SpecError(loc, fmt::format("expand {} * hidden {} = {} is not a positive whole number of at most {}",
                                     expand, hidden, total, int64_t(kMaxTotal)));
  const auto whole = static_cast<int64_t>(rounded);
  if (whole % heads != 0)
    throw SpecError(loc, fmt::format("expand {} * hidden {} = {} is not divisible by {} heads", expand, hidden, whole, heads));
  if (whole / heads > limits::kMaxHeadDim)
    throw SpecError(loc, fmt::format("expand {} * hidden {} = {} over {} heads is {} per head; the limit is {}", expand,
                                     hidden, whole, heads, whole / heads, limits::kMaxHeadDim));
  return whole / heads;
}

}  // namespace linac::spec
