#include "model/cache_memory.h"

#include "model/attention_layer.h"
#include "model/roles.h"

#include <c10/core/ScalarType.h>

namespace linac::model {
namespace {

constexpr int64_t kStateBytes = sizeof(float);  // recurrent states are fp32

CacheBytes linearBytes(const runtime::VariantKernels& kernels, int64_t hidden, int64_t batch, int64_t elementBytes) {
  const MixerDims d = resolveDims(kernels, hidden);
  CacheBytes b;
  const int64_t perHead = kernels.vectorState ? d.valueDim : d.keyDim * d.valueDim;
  b.state = batch * d.heads * perHead * kStateBytes;
  bool shifted = false;
  for (const auto& in : kernels.layer.inputs) {
    if (in.conv > 0) b.conv += batch * (in.conv - 1) * extentWidth(in.extent, d) * elementBytes;
    shifted = shifted || in.tokenShift;
  }
  if (shifted) b.shift = batch * hidden * elementBytes;
  return b;
}

CacheBytes attentionBytes(const spec::VariantSpec& spec, const spec::PresetSpec& preset, int64_t batch,
                          int64_t context, int64_t elementBytes) {
  const AttentionDims d = resolveAttentionDims(spec, preset);
  CacheBytes b;
  b.kv = 2 * batch * context * d.kvHeads * d.headDim * elementBytes;
  return b;
}

}  // namespace

CacheMemory cacheMemory(const ModelConfig& config, int64_t batch, int64_t context, torch::ScalarType dtype) {
  const int64_t elementBytes = static_cast<int64_t>(c10::elementSize(dtype));
  const std::vector<bool> attention = config.schedule.expand(config.preset.layers);
  CacheMemory out;
  for (int64_t i = 0; i < config.preset.layers; ++i) {
    LayerMemory m;
    m.layer = i;
    m.attention = attention[static_cast<size_t>(i)];
    m.name = m.attention ? config.attention.name : config.linear.name;
    m.bytes = m.attention ? attentionBytes(config.attention, config.preset, batch, context, elementBytes)
                          : linearBytes(linearKernels(config), config.preset.hidden, batch, elementBytes);
    out.total += m.bytes;
    out.layers.push_back(std::move(m));
  }
  return out;
}

}  // namespace linac::model
