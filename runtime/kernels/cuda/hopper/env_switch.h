// The Hopper paths' switches in the environment (LINAC_HOPPER_*), for A / B runs and opt-in paths;
// read where a call is dispatched. A switch between two correct paths may also say "auto": time
// both on the first call of a shape class and keep the faster (kernels/cuda/autotune.h).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace linac::kernels::cuda::hopper {

/// The switch `name`: "1" on, "0" off; unset or any other value: `fallback` (the path's default).
inline bool envSwitch(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  if (value != nullptr && std::strcmp(value, "1") == 0) return true;
  if (value != nullptr && std::strcmp(value, "0") == 0) return false;
  return fallback;
}

/// A switch between two correct paths: off, on, or timed (autotune.h).
enum class Switch { Off, On, Auto };

/// The switch `name`: "1" on, "0" off, "auto" timed; unset or any other value: `fallback`.
inline Switch envChoice(const char* name, Switch fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr) return fallback;
  if (std::strcmp(value, "1") == 0) return Switch::On;
  if (std::strcmp(value, "0") == 0) return Switch::Off;
  if (std::strcmp(value, "auto") == 0) return Switch::Auto;
  return fallback;
}

/// The segments a sequence of the segmented passes (the forward's, forward_split.cuh, and the
/// diagonal backward's state passes, diag_state_scan.cuh): LINAC_HOPPER_SEGMENT_COUNT=N pins it for
/// A / B runs and the lab's cases; unset: `fallback` (the caller's own count).
inline int64_t segmentCountPinned(int64_t fallback) {
  const char* value = std::getenv("LINAC_HOPPER_SEGMENT_COUNT");
  return value != nullptr ? std::atoll(value) : fallback;
}

}  // namespace linac::kernels::cuda::hopper
