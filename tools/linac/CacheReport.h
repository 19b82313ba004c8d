// Printing inference-cache sizes (model/cache_memory.h) for `linac memory` and `linac generate`.
#pragma once

#include "model/cache_memory.h"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace linac::cli {

/// "512 B", "1.50 KiB", "3.25 MiB", "1.07 GiB".
std::string formatBytes(int64_t bytes);

/// One row per layer (state, conv, shift, kv cache, total) and a total row.
void printCacheTable(std::ostream& os, const model::CacheMemory& memory);

/// {"state": .., "conv": .., "shift": .., "kv": .., "total": ..} in bytes.
nlohmann::ordered_json bytesJson(const model::CacheBytes& bytes);

}  // namespace linac::cli
