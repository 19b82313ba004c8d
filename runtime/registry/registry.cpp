#include "registry/registry.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace linac::runtime {
namespace {

/// Function-local so registration from other translation units' static initialisers is safe.
std::map<std::string, const VariantKernels*>& table() {
  static std::map<std::string, const VariantKernels*> t;
  return t;
}

}  // namespace

const PrologueMap* VariantKernels::find(std::string_view role) const {
  auto it = std::find_if(maps.begin(), maps.end(), [&](const PrologueMap& m) { return m.role == role; });
  return it == maps.end() ? nullptr : &*it;
}

void Registry::add(const VariantKernels* variant) {
  auto [it, inserted] = table().emplace(variant->name, variant);
  if (!inserted && it->second != variant)
    throw std::logic_error("two generated variants named '" + variant->name + "' are linked in");
}

const VariantKernels* Registry::find(const std::string& name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : it->second;
}

std::vector<const VariantKernels*> Registry::all() {
  std::vector<const VariantKernels*> out;
  for (const auto& [_, v] : table()) out.push_back(v);
  return out;
}

}  // namespace linac::runtime
