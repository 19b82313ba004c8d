#include "model/cache.h"

#include <stdexcept>
#include <string>

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

ModelCache ModelCache::rows(int64_t start, int64_t count) const {
  if (start < 0 || count < 1 || start + count > batch)
    throw std::invalid_argument("cache rows: [" + std::to_string(start) + ", " + std::to_string(start + count) +
                                ") is not within its " + std::to_string(batch) + " rows");
  auto view = [&](const torch::Tensor& t) { return t.defined() ? t.narrow(0, start, count) : t; };
  ModelCache out;
  out.batch = count;
  out.capacity = capacity;
  for (const LayerCache& layer : layers) {
    LayerCache l;
    if (layer.linear) {
      LinearLayerCache c;
      c.state = view(layer.linear->state);
      for (const auto& [name, t] : layer.linear->conv) c.conv[name] = view(t);
      c.shift = view(layer.linear->shift);
      l.linear = std::move(c);
    }
    if (layer.attention) l.attention = AttentionLayerCache{view(layer.attention->k), view(layer.attention->v), 0};
    out.layers.push_back(std::move(l));
  }
  return out;
}

void ModelCache::setRowLengths(const torch::Tensor& lengths) {
  if (lengths.dim() != 1 || lengths.size(0) != batch || lengths.scalar_type() != torch::kInt64)
    throw std::invalid_argument("cache row lengths: expected [" + std::to_string(batch) + "] int64");
  const torch::Tensor host = lengths.to(torch::kCPU);
  const int64_t longest = host.max().item<int64_t>(), shortest = host.min().item<int64_t>();
  if (shortest < 1 || longest > capacity)
    throw std::invalid_argument("cache row lengths: each must lie in [1, " + std::to_string(capacity) + "]");
  position = longest;
  for (LayerCache& layer : layers)
    if (layer.attention) layer.attention->length = longest;
  rowLengths = lengths.clone();
}

CacheBytes ModelCache::bytes() const {
  CacheBytes total;
  for (const CacheBytes& b : layerBytes()) total += b;
  return total;
}

}  // namespace linac::model
