#include "model/cache.h"

namespace linac::model {

CacheBytes& CacheBytes::operator+=(const CacheBytes& other) {
  state += other.state, conv += other.conv, shift += other.shift, kv += other.kv;
  return *this;
}

int64_t storageBytes(const torch::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
}

std::vector<CacheBytes> ModelCache::layerBytes() const {
  std::vector<CacheBytes> out;
  for (const LayerCache& layer : layers) {
    CacheBytes b;
    if (layer.linear) {
      b.state = storageBytes(layer.linear->state);
      for (const auto& [name, t] : layer.linear->conv) b.conv += storageBytes(t);
      b.shift = storageBytes(layer.linear->shift);
    }
    if (layer.attention) b.kv = storageBytes(layer.attention->k) + storageBytes(layer.attention->v);
    out.push_back(b);
  }
  return out;
}

CacheBytes ModelCache::bytes() const {
  CacheBytes total;
  for (const CacheBytes& b : layerBytes()) total += b;
  return total;
}

}  // namespace linac::model
