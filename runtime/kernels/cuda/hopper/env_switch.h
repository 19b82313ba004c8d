// The Hopper paths' on / off switches in the environment (LINAC_HOPPER_*), for A / B runs and
// opt-in paths; read where a call is dispatched.
#pragma once

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

}  // namespace linac::kernels::cuda::hopper
