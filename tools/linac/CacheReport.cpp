#include "CacheReport.h"

#include <array>
#include <cstdio>
#include <iomanip>

namespace linac::cli {
namespace {

constexpr double kUnitStep = 1024.0;
constexpr int kNameWidth = 16, kBytesWidth = 12;

}  // namespace

std::string formatBytes(int64_t bytes) {
  static const std::array<const char*, 4> units = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < int64_t(kUnitStep)) return std::to_string(bytes) + " B";
  double value = double(bytes);
  size_t unit = 0;
  for (value /= kUnitStep; value >= kUnitStep && unit + 1 < units.size(); value /= kUnitStep) ++unit;
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  return text;
}

void printCacheTable(std::ostream& os, const model::CacheMemory& memory) {
  auto row = [&](const std::string& layer, const std::string& mixer, const model::CacheBytes& b) {
    os << std::left << std::setw(7) << layer << std::setw(kNameWidth) << mixer << std::right;
    for (int64_t v : {b.state, b.conv, b.shift, b.kv, b.total()}) os << std::setw(kBytesWidth) << formatBytes(v);
    os << "\n";
  };
  os << std::left << std::setw(7) << "layer" << std::setw(kNameWidth) << "mixer" << std::right;
  for (const char* h : {"state", "conv", "shift", "kv cache", "total"}) os << std::setw(kBytesWidth) << h;
  os << "\n";
  for (const auto& l : memory.layers) row(std::to_string(l.layer), l.name, l.bytes);
  row("total", "", memory.total);
}

nlohmann::ordered_json bytesJson(const model::CacheBytes& b) {
  return {{"state", b.state}, {"conv", b.conv}, {"shift", b.shift}, {"kv", b.kv}, {"total", b.total()}};
}

}  // namespace linac::cli
