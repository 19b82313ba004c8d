#include "model/attention_layer.h"

#include "ops/profile_scope.h"

#include <optional>
#include <stdexcept>

namespace linac::model {

using ops::scope::profiled;
namespace scope = ops::scope;

AttentionDims resolveAttentionDims(const spec::VariantSpec& spec, const spec::PresetSpec& preset) {
  if (spec.kind != spec::VariantKind::Attention)
    throw std::invalid_argument("model: '" + spec.name + "' is not an attention spec");
  AttentionDims d;
  d.hidden = preset.hidden;
  d.heads = preset.attnHeads > 0 ? preset.attnHeads : spec.heads;
  d.headDim = spec.keyDim.resolve(preset.hidden, d.heads);
  d.kvHeads = spec.attention.kvHeads > 0 ? spec.attention.kvHeads : d.heads;
  if (d.heads % d.kvHeads)
    throw std::invalid_argument("model: kv_heads " + std::to_string(d.kvHeads) + " does not divide " +
                                std::to_string(d.heads) + " attention heads");
  return d;
}

Plan AttentionMixerImpl::plan(const spec::VariantSpec& spec, const spec::PresetSpec& preset) {
  const AttentionDims d = resolveAttentionDims(spec, preset);
  return {{"q_proj", {d.heads * d.headDim, d.hidden}, ParamInit::normal()},
          {"k_proj", {d.kvHeads * d.headDim, d.hidden}, ParamInit::normal()},
          {"v_proj", {d.kvHeads * d.headDim, d.hidden}, ParamInit::normal()},
          {"o_proj", {d.hidden, d.heads * d.headDim}, ParamInit::normal()}};
}

AttentionMixerImpl::AttentionMixerImpl(const spec::VariantSpec& spec, const spec::PresetSpec& preset)
    : attention_(spec.attention), dims_(resolveAttentionDims(spec, preset)) {
  registerPlan(*this, plan(spec, preset), params_);
}

torch::Tensor AttentionMixerImpl::forward(const torch::Tensor& x, const Documents* documents) {
  const int64_t B = x.size(0), T = x.size(1), H = dims_.heads, Hkv = dims_.kvHeads, D = dims_.headDim;
  auto w = [&](const char* name) { return params_.at(name).to(x.scalar_type()); };
  torch::Tensor q, k, v;
  profiled(scope::kProjections, [&] {
    q = torch::linear(x, w("q_proj")).view({B, T, H, D});
    k = torch::linear(x, w("k_proj")).view({B, T, Hkv, D});
    v = torch::linear(x, w("v_proj")).view({B, T, Hkv, D});
  });
  torch::Tensor o = profiled(scope::kAttention, [&] { return attend(q, k, v, documents); });  // [B, T, H * D]
  return profiled(scope::kProjections, [&] { return torch::linear(o, w("o_proj")); });
}

torch::Tensor AttentionMixerImpl::attend(torch::Tensor q, torch::Tensor k, torch::Tensor v,
                                         const Documents* documents) const {
  const int64_t B = q.size(0), T = q.size(1), H = dims_.heads, Hkv = dims_.kvHeads, D = dims_.headDim;
  if (attention_.rope) {
    q = documents ? ropeAt(q, attention_.ropeTheta, documents->positions) : rope(q, attention_.ropeTheta);
    k = documents ? ropeAt(k, attention_.ropeTheta, documents->positions) : rope(k, attention_.ropeTheta);
  }
  if (Hkv != H) {  // GQA: each kv head serves H / Hkv consecutive query heads
    k = k.repeat_interleave(H / Hkv, 2);
    v = v.repeat_interleave(H / Hkv, 2);
  }
  // SDPA takes [B, H, T, D]: flash / memory-efficient kernels on GPU, math on CPU. Packed
  // documents: a block-diagonal causal mask [B, 1, T, T] (query t sees key s <= t of its document).
  std::optional<torch::Tensor> mask;
  if (documents) {
    const torch::Tensor& ids = documents->ids;  // [B, T]
    torch::Tensor causal = torch::ones({T, T}, ids.options().dtype(torch::kBool)).tril();
    mask = (ids.unsqueeze(2) == ids.unsqueeze(1)).logical_and(causal).unsqueeze(1);
  }
  torch::Tensor o = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask,
                                                     0.0, /*is_causal=*/!documents);
  return o.transpose(1, 2).reshape({B, T, H * D});  // [B, T, H * D]
}

}  // namespace linac::model
