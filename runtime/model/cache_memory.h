// The bytes of a model's inference caches (model/cache.h) from its specs alone, nothing
// allocated: usable for a 1.3B model at a 128k context on any machine (`linac memory`).
// A linear layer holds its recurrent state in fp32 whatever the model's dtype (the kernels keep
// states in fp32): B x H x dk x dv x 4 (matrix), B x H x dv x 4 (vector); its short convs hold
// B x (W - 1) x width values and its token shift B x hidden, both in the model's dtype. An
// attention layer holds keys and values: 2 x B x context x kv_heads x head_dim in the model's
// dtype. Only the attention layers grow with the context.
#pragma once

#include "model/cache.h"
#include "model/model.h"

#include <torch/types.h>

#include <string>
#include <vector>

namespace linac::model {

struct LayerMemory {
  int64_t layer = 0;
  std::string name;        // the spec's name
  bool attention = false;
  CacheBytes bytes;
};

struct CacheMemory {
  std::vector<LayerMemory> layers;
  CacheBytes total;
};

/// The caches HybridLMImpl::makeCache(batch, context) allocates for `config` with activations of
/// `dtype` (fp32 states regardless).
CacheMemory cacheMemory(const ModelConfig& config, int64_t batch, int64_t context, torch::ScalarType dtype);

}  // namespace linac::model
