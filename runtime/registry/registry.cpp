#include "registry/registry.h"

#include <dlfcn.h>

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

/// Device maps by variant name.
std::map<std::string, const VariantDeviceMaps*>& deviceTable() {
  static std::map<std::string, const VariantDeviceMaps*> t;
  return t;
}

bool& replacing() {
  static bool r = false;
  return r;
}

}  // namespace

ReplaceScope::ReplaceScope() { replacing() = true; }
ReplaceScope::~ReplaceScope() { replacing() = false; }

const VariantKernels& loadVariantLibrary(const std::string& path, const std::string& name) {
  ReplaceScope replace;
  // RTLD_NOW: fail here, not at first use; the library's symbols stay local to it.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error("cannot load " + path + ": " + ::dlerror());
  const VariantKernels* v = Registry::find(name);
  if (!v) throw std::runtime_error(path + " registered no variant named '" + name + "'");
  return *v;
}

const PrologueMap* VariantKernels::find(std::string_view role) const {
  auto it = std::find_if(maps.begin(), maps.end(), [&](const PrologueMap& m) { return m.role == role; });
  return it == maps.end() ? nullptr : &*it;
}

bool VariantKernels::learnsDecay() const {
  if (kind.decay == kernels::DecayClass::None) return false;
  const PrologueMap* decay = find("decay");
  if (decay == nullptr) return true;  // a plain reference to an input
  auto named = [](const auto& list, const std::string& name) {
    return std::any_of(list.begin(), list.end(), [&](const auto& entry) { return entry.name == name; });
  };
  return std::any_of(decay->args.begin(), decay->args.end(), [&](const std::string& arg) {
    return named(layer.inputs, arg) || named(layer.params, arg);
  });
}

const DeviceMap* VariantDeviceMaps::find(std::string_view role) const {
  auto it = std::find_if(maps.begin(), maps.end(), [&](const DeviceMap& m) { return m.role == role; });
  return it == maps.end() ? nullptr : &*it;
}

void Registry::add(const VariantKernels* variant) {
  auto [it, inserted] = table().emplace(variant->name, variant);
  if (inserted || it->second == variant) return;
  if (!replacing())
    throw std::logic_error("two generated variants named '" + variant->name + "' are linked in");
  it->second = variant;
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

void Registry::addDevice(const VariantDeviceMaps* maps) {
  auto [it, inserted] = deviceTable().emplace(maps->name, maps);
  if (inserted || it->second == maps) return;
  if (!replacing())
    throw std::logic_error("two sets of device maps for variant '" + maps->name + "' are linked in");
  it->second = maps;
}

const DeviceMap* Registry::findDevice(const PrologueMap& map) {
  for (const auto& [name, variant] : table()) {
    auto owns = [&](const PrologueMap& m) { return &m == &map; };
    if (std::none_of(variant->maps.begin(), variant->maps.end(), owns)) continue;
    auto it = deviceTable().find(name);
    // A different hash: the variant was replaced by one compiled on demand from a changed spec.
    if (it == deviceTable().end() || it->second->specHash != variant->specHash) return nullptr;
    return it->second->find(map.role);
  }
  return nullptr;
}

FusedForwardFn Registry::findFusedForward(const VariantKernels& variant) {
  auto it = deviceTable().find(variant.name);
  if (it == deviceTable().end() || it->second->specHash != variant.specHash) return nullptr;
  return it->second->fusedForward;
}

}  // namespace linac::runtime
