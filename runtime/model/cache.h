// Inference caches of the hybrid LM: what each layer keeps between calls so that a sequence can be
// continued one token at a time instead of re-running it whole. A linear layer keeps its
// recurrent state and the last inputs of its short convs and token shift; an attention layer its
// keys and values. Every cache tensor is allocated once, at its full size, when the cache is made
// (HybridLMImpl::makeCache), and updated in place: the bytes it holds are known before generation
// starts (cacheMemory in cache_memory.h computes them from the specs alone).
//
// A fresh cache is zeros, which is exactly the start of a sequence: the recurrence starts from a
// zero state, the short conv pads with zeros on the left, the token shift reads x_{-1} = 0.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace linac::model {

/// The bytes of one layer's (or a model's) cache, by kind.
struct CacheBytes {
  int64_t state = 0;  // recurrent state (fp32)
  int64_t conv = 0;   // short-conv inputs
  int64_t shift = 0;  // token-shift input
  int64_t kv = 0;     // attention keys and values
  int64_t total() const { return state + conv + shift + kv; }
  CacheBytes& operator+=(const CacheBytes& other);
};

struct LinearLayerCache {
  torch::Tensor state;  // matrix state [B, H, dk, dv] fp32; vector state [B, H * dv] fp32
  /// Per input with a short conv of width W: its last W - 1 projected values [B, W - 1, width].
  std::map<std::string, torch::Tensor> conv;
  torch::Tensor shift;  // [B, hidden]: the mixer input of the last token; undefined without token shift
};

struct AttentionLayerCache {
  torch::Tensor k, v;  // [B, kv heads, capacity, head dim], keys after RoPE
  int64_t length = 0;  // positions filled
};

/// One layer's cache: exactly one of the two is set, as the schedule places the layer.
struct LayerCache {
  std::optional<LinearLayerCache> linear;
  std::optional<AttentionLayerCache> attention;
};

/// Rows of different lengths (prompts of different lengths generated together): each row is
/// prefilled through a view of its rows (ModelCache::rows), then setRowLengths records every
/// row's length and the decode steps continue each row at its own position.
struct ModelCache {
  int64_t batch = 0;
  int64_t capacity = 0;  // the most positions it holds (the attention layers' cache length)
  int64_t position = 0;  // tokens consumed so far (with rowLengths: by the longest row)
  torch::Tensor rowLengths;  // [B] int64 on the cache's device, each row's tokens; undefined: all at `position`
  std::vector<LayerCache> layers;

  /// Rows [start, start + count) as a cache of their own at position 0: views of this cache's
  /// tensors, so what a forward writes into it lands in these rows here. For a fresh cache.
  ModelCache rows(int64_t start, int64_t count) const;
  /// Every row's length after its rows were filled through rows() ([B] int64 on the cache's
  /// device, each >= 1): the next decode step continues row b at position lengths[b].
  void setRowLengths(const torch::Tensor& lengths);

  /// The bytes its tensors hold (their storages, so a view into a larger buffer would count the
  /// whole buffer), per layer.
  std::vector<CacheBytes> layerBytes() const;
  CacheBytes bytes() const;
};

/// Bytes of the storage behind `t` (0 for an undefined tensor).
int64_t storageBytes(const torch::Tensor& t);

}  // namespace linac::model
