// Full attention continuing cached sequences (inference): a key / value cache per layer.
#include "model/attention_layer.h"

#include <optional>
#include <stdexcept>

namespace linac::model {

AttentionLayerCache AttentionMixerImpl::makeCache(int64_t batch, int64_t capacity,
                                                  const torch::TensorOptions& options) const {
  AttentionLayerCache c;
  c.k = torch::zeros({batch, dims_.kvHeads, capacity, dims_.headDim}, options);  // [B, Hkv, capacity, D]
  c.v = torch::zeros({batch, dims_.kvHeads, capacity, dims_.headDim}, options);
  return c;
}

torch::Tensor AttentionMixerImpl::forwardCached(const torch::Tensor& x, AttentionLayerCache& cache,
                                                const torch::Tensor& rowPositions) {
  const int64_t B = x.size(0), T = x.size(1), H = dims_.heads, Hkv = dims_.kvHeads, D = dims_.headDim;
  const int64_t start = cache.length, end = start + T, capacity = cache.k.size(2);
  if (end > capacity)
    throw std::invalid_argument("attention cache: " + std::to_string(end) + " positions do not fit its capacity of " +
                                std::to_string(capacity) + "; make the cache for the prompt plus every new token");
  const bool ragged = rowPositions.defined();
  if (ragged && T != 1) throw std::invalid_argument("attention cache: rows of their own lengths take one token");
  auto w = [&](const char* name) { return params_.at(name).to(x.scalar_type()); };
  torch::Tensor q = torch::linear(x, w("q_proj")).view({B, T, H, D});
  torch::Tensor k = torch::linear(x, w("k_proj")).view({B, T, Hkv, D});
  torch::Tensor v = torch::linear(x, w("v_proj")).view({B, T, Hkv, D});
  if (attention_.rope) {
    q = ragged ? ropeAt(q, attention_.ropeTheta, rowPositions.view({B, 1})) : rope(q, attention_.ropeTheta, start);
    k = ragged ? ropeAt(k, attention_.ropeTheta, rowPositions.view({B, 1})) : rope(k, attention_.ropeTheta, start);
  }
  std::optional<torch::Tensor> mask;
  if (ragged) {
    // Row b's key and value at its own position; it sees positions 0..rowPositions[b] (the
    // columns past a shorter row's end hold nothing of it). mask [B, 1, 1, end].
    torch::Tensor rows = torch::arange(B, rowPositions.options());
    cache.k.index_put_({rows, torch::indexing::Slice(), rowPositions}, k.select(1, 0).to(cache.k.scalar_type()));  // [B, Hkv, D]
    cache.v.index_put_({rows, torch::indexing::Slice(), rowPositions}, v.select(1, 0).to(cache.v.scalar_type()));
    mask = (torch::arange(end, rowPositions.options()).view({1, end}) <= rowPositions.view({B, 1})).view({B, 1, 1, end});
  } else {
    cache.k.narrow(2, start, T).copy_(k.transpose(1, 2));  // [B, Hkv, T, D]
    cache.v.narrow(2, start, T).copy_(v.transpose(1, 2));
    // Query i (position start + i) sees positions 0..start + i; one new token sees them all.
    if (T > 1) mask = torch::ones({T, end}, x.options().dtype(torch::kBool)).tril(start);  // [T, end]
  }
  cache.length = end;
  torch::Tensor keys = cache.k.narrow(2, 0, end).to(x.scalar_type());  // [B, Hkv, end, D]
  torch::Tensor values = cache.v.narrow(2, 0, end).to(x.scalar_type());
  if (Hkv != H) {  // GQA: each kv head serves H / Hkv consecutive query heads
    keys = keys.repeat_interleave(H / Hkv, 1);
    values = values.repeat_interleave(H / Hkv, 1);
  }
  torch::Tensor o = at::scaled_dot_product_attention(q.transpose(1, 2), keys, values, mask);  // [B, H, T, D]
  o = o.transpose(1, 2).reshape({B, T, H * D});  // [B, T, H * D]
  return torch::linear(o, w("o_proj"));
}

}  // namespace linac::model
