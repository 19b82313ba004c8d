// Full causal softmax attention (kind: attention), as fla's layers/attn.py: q/k/v/o projections
// without bias, RoPE on q and k, GQA when kv_heads < heads, scaled_dot_product_attention.
#pragma once

#include "model/cache.h"
#include "model/documents.h"
#include "model/layers.h"

#include <torch/torch.h>

#include <map>
#include <string>

namespace linac::model {

struct AttentionDims {
  int64_t hidden = 0, heads = 0, kvHeads = 0, headDim = 0;
};

/// Heads: preset.attnHeads when given (the preset fixes the attention layers' heads), else the
/// spec's; head dim: the spec's key_dim at that head count; kv heads: attention.kv_heads or heads.
AttentionDims resolveAttentionDims(const spec::VariantSpec& spec, const spec::PresetSpec& preset);

class AttentionMixerImpl : public torch::nn::Module {
public:
  AttentionMixerImpl(const spec::VariantSpec& spec, const spec::PresetSpec& preset);
  static Plan plan(const spec::VariantSpec& spec, const spec::PresetSpec& preset);
  /// x [B, T, hidden] -> [B, T, hidden]; with `documents`, each token attends within its own
  /// packed document, and RoPE counts from the document's start (model/documents.h).
  torch::Tensor forward(const torch::Tensor& x, const Documents* documents = nullptr);

  /// An empty key / value cache of `capacity` positions for `batch` sequences, in `options`'
  /// dtype and device (attention_layer_cached.cpp).
  AttentionLayerCache makeCache(int64_t batch, int64_t capacity, const torch::TensorOptions& options) const;
  /// x [B, T, hidden], the next T tokens of the cached sequences -> [B, T, hidden]: their keys and
  /// values are appended to the cache and each query attends to every cached position up to its
  /// own. Equals forward() over the whole sequence. Throws when the cache would overflow.
  /// rowPositions [B] (one token, rows of different lengths; else undefined): row b's token is at
  /// rowPositions[b], its key and value are written there, and it attends to positions up to it.
  torch::Tensor forwardCached(const torch::Tensor& x, AttentionLayerCache& cache, const torch::Tensor& rowPositions = {});

private:
  /// RoPE, GQA's repeated kv heads and causal SDPA: q [B, T, H, D], k, v [B, T, Hkv, D] -> [B, T, H * D].
  torch::Tensor attend(torch::Tensor q, torch::Tensor k, torch::Tensor v, const Documents* documents) const;

  spec::AttentionSpec attention_;
  AttentionDims dims_;
  std::map<std::string, torch::Tensor> params_;
};
TORCH_MODULE(AttentionMixer);

}  // namespace linac::model
