#include "model/model.h"

#include "model/attention_layer.h"
#include "model/checkpoint.h"
#include "model/layers.h"
#include "model/linear_layer.h"
#include "ops/linear_cross_entropy.h"
#include "ops/profile_scope.h"

#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace linac::model {
namespace {

using ops::scope::profiled;
namespace scope = ops::scope;

/// A stage's output seen during a probed forward: label, parameter-name prefixes, output.
using StageProbe = std::function<void(const std::string&, const std::vector<std::string>&, const torch::Tensor&)>;

/// "12 of 4096 values, first nan at [0, 5, 17]", or nullopt when `t` is finite everywhere.
std::optional<std::string> nonFiniteSummary(const torch::Tensor& t) {
  torch::Tensor bad = torch::isfinite(t).logical_not();  // same shape as t
  const int64_t count = bad.sum().item<int64_t>();
  if (count == 0) return std::nullopt;
  int64_t flat = bad.flatten().nonzero()[0][0].item<int64_t>();  // first non-finite, row-major
  const double value = t.flatten()[flat].item<double>();
  std::vector<int64_t> index(static_cast<size_t>(t.dim()));
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    index[static_cast<size_t>(d)] = flat % t.size(d);
    flat /= t.size(d);
  }
  std::ostringstream out;
  out << count << " of " << t.numel() << " values, first " << (std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf")
      << " at [";
  for (size_t d = 0; d < index.size(); ++d) out << (d ? ", " : "") << index[d];
  out << "]";
  return out.str();
}

/// One block: x + mixer(RMSNorm(x)), then h + SwiGLU(RMSNorm(h)) (fla's pre-norm blocks).
class BlockImpl : public torch::nn::Module {
public:
  BlockImpl(const ModelConfig& c, int64_t layer, bool attention) {
    if (attention)
      attention_ = register_module("mixer", AttentionMixer(c.attention, c.preset));
    else
      linear_ = register_module("mixer", LinearMixer(linearKernels(c), c.preset.hidden, layer, c.preset.layers,
                                                      c.backend, &c.linear));
    registerPlan(*this, plan(c.preset), params_);
  }

  /// The block's own parameters (norms and MLP; the mixer has its own plan).
  static Plan plan(const spec::PresetSpec& preset) {
    const ParamInit ones = ParamInit::ones();
    Plan p = {{"attn_norm", {preset.hidden}, ones}, {"mlp_norm", {preset.hidden}, ones}};
    for (auto& q : swigluPlan(preset.hidden, intermediateSize(preset), "mlp")) p.push_back(q);
    return p;
  }

  /// x [B, T, hidden] -> [B, T, hidden] (`documents`: model/documents.h); `probe` (may be null)
  /// sees the mixer and MLP outputs, labelled "layer <index> (<name> mixer)" and "layer <index> (mlp)".
  torch::Tensor forward(const torch::Tensor& x, const Documents* documents = nullptr, const StageProbe* probe = nullptr,
                        int64_t index = 0, const std::string& name = "") {
    // normalised in fp32 into one copy in the dtype all the mixer's projections read
    torch::Tensor n = profiled(scope::kNorm, [&] { return blockNorm(x, params_.at("attn_norm")); });
    torch::Tensor mixed = attention_ ? attention_->forward(n, documents) : linear_->forward(n, documents);  // [B, T, hidden]
    const std::string layer = "blocks." + std::to_string(index) + ".";
    if (probe) (*probe)("layer " + std::to_string(index) + " (" + name + " mixer)", {layer + "attn_norm", layer + "mixer."}, mixed);
    torch::Tensor h, m;  // h = x + mixed, m = the MLP's normalised input
    std::tie(h, m) = profiled(scope::kNorm, [&] { return addBlockNorm(x, mixed, params_.at("mlp_norm")); });
    torch::Tensor mlp = profiled(scope::kMlp, [&] { return swiglu(m, params_, "mlp"); });  // [B, T, hidden]
    if (probe) (*probe)("layer " + std::to_string(index) + " (mlp)", {layer + "mlp"}, mlp);
    return h + mlp;
  }

  LayerCache makeCache(int64_t batch, int64_t capacity, const torch::TensorOptions& options) const {
    LayerCache c;
    if (attention_) c.attention = attention_->makeCache(batch, capacity, options);
    else c.linear = linear_->makeCache(batch, options);
    return c;
  }

  /// forward() continuing the sequences `cache` holds, the first of x's tokens at `position`, or
  /// (one token, rows of different lengths) row b's at rowPositions[b].
  torch::Tensor forwardCached(const torch::Tensor& x, LayerCache& cache, int64_t position,
                              const torch::Tensor& rowPositions) {
    torch::Tensor n = blockNorm(x, params_.at("attn_norm"));  // as forward() reads it
    torch::Tensor mixed = attention_ ? attention_->forwardCached(n, *cache.attention, rowPositions)
                                     : linear_->forwardCached(n, *cache.linear, position, rowPositions);  // [B, T, hidden]
    auto [h, m] = addBlockNorm(x, mixed, params_.at("mlp_norm"));
    return h + swiglu(m, params_, "mlp");
  }

private:
  LinearMixer linear_{nullptr};
  AttentionMixer attention_{nullptr};
  std::map<std::string, torch::Tensor> params_;
};
TORCH_MODULE(Block);

}  // namespace

HybridLMImpl::HybridLMImpl(const ModelConfig& config) : config_(config) {
  const auto& p = config.preset;
  const std::vector<bool> attention = config.schedule.expand(p.layers);
  embed_ = register_module("embed", torch::nn::Embedding(p.vocab, p.hidden));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < p.layers; ++i) {
    blocks_->push_back(Block(config, i, attention[i]));
    layerNames_.push_back(attention[i] ? config.attention.name : config.linear.name);
  }
  finalNormWeight_ = register_parameter("final_norm", torch::ones({p.hidden}));
  if (!p.tieEmbeddings) head_ = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(p.hidden, p.vocab).bias(false)));
  // fla's _init_weights: embeddings and the LM head normal(0, 0.02) (LibTorch's defaults differ).
  torch::NoGradGuard noGrad;
  embed_->weight.normal_(0.0, kInitStd);
  if (head_) head_->weight.normal_(0.0, kInitStd);
}

torch::Tensor HybridLMImpl::forward(const torch::Tensor& tokens, const Documents* documents) {
  return forwardProbed(tokens, nullptr, documents);
}

torch::Tensor HybridLMImpl::forwardProbed(const torch::Tensor& tokens, const Probe* probe, const Documents* documents) {
  torch::Tensor x = profiled(scope::kEmbedding, [&] { return embed_->forward(tokens); });  // [B, T, hidden]
  if (probe) (*probe)("the embedding", {"embed."}, x);
  for (size_t i = 0; i < blocks_->size(); ++i)
    x = probe ? blocks_->ptr(i)->as<BlockImpl>()->forward(x, documents, probe, static_cast<int64_t>(i), layerNames_[i])
              : forwardBlock(i, x, documents);
  x = profiled(scope::kNorm, [&] { return rmsNorm(x, finalNormWeight_); });  // [B, T, hidden]
  if (probe) (*probe)("the final norm", {"final_norm"}, x);
  const torch::Tensor& w = head_ ? head_->weight : embed_->weight;  // [vocab, hidden]
  torch::Tensor logits = profiled(scope::kLmHeadLoss, [&] { return torch::linear(x, w.to(x.scalar_type())); });  // [B, T, vocab]
  if (probe) (*probe)("the logits", {head_ ? "head." : "embed."}, logits);
  return logits;
}

std::string HybridLMImpl::locateNonFinite(const torch::Tensor& tokens) {
  const auto named = named_parameters(/*recurse=*/true);
  // The first parameter whose name starts with one of `prefixes` (all when empty) and whose
  // value (or gradient, with `grad`) is non-finite: "blocks.3.mixer.q_proj (1 of 16384 values, ...)".
  auto firstBadParameter = [&](const std::vector<std::string>& prefixes, bool grad) -> std::string {
    for (const auto& item : named) {
      bool match = prefixes.empty();
      for (const auto& p : prefixes) match = match || item.key().rfind(p, 0) == 0;
      const torch::Tensor& t = grad ? item.value().grad() : item.value();
      if (!match || !t.defined()) continue;
      if (auto summary = nonFiniteSummary(t.detach())) return item.key() + " (" + *summary + ")";
    }
    return "";
  };

  std::string found;
  Probe probe = [&](const std::string& label, const std::vector<std::string>& params, const torch::Tensor& out) {
    if (!found.empty()) return;
    auto summary = nonFiniteSummary(out);
    if (!summary) return;
    found = "first non-finite value in " + label + " output (" + *summary + ")";
    const std::string param = firstBadParameter(params, false);
    if (!param.empty()) found += "; non-finite parameter " + param;
  };
  {
    torch::NoGradGuard noGrad;
    forwardProbed(tokens, &probe, nullptr);
  }
  if (!found.empty()) return found;
  std::string message = "the forward pass is finite everywhere (the non-finite value arises in the loss, backward "
                        "or optimizer)";
  if (std::string p = firstBadParameter({}, false); !p.empty()) return message + "; first non-finite parameter " + p;
  if (std::string g = firstBadParameter({}, true); !g.empty()) return message + "; first non-finite gradient " + g;
  return message + "; every parameter and gradient is finite";
}

ModelCache HybridLMImpl::makeCache(int64_t batch, int64_t capacity) const {
  ModelCache cache;
  cache.batch = batch;
  cache.capacity = capacity;
  const torch::TensorOptions options = embed_->weight.options().requires_grad(false);
  for (size_t i = 0; i < blocks_->size(); ++i)
    cache.layers.push_back(blocks_->ptr(i)->as<BlockImpl>()->makeCache(batch, capacity, options));
  return cache;
}

torch::Tensor HybridLMImpl::forwardCached(const torch::Tensor& tokens, ModelCache& cache, bool lastOnly) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (B != cache.batch || cache.layers.size() != blocks_->size())
    throw std::invalid_argument("forwardCached: " + std::to_string(B) + " sequences given to a cache made for " +
                                std::to_string(cache.batch) + " (or for another model)");
  if (T < 1 || cache.position + T > cache.capacity)
    throw std::invalid_argument("forwardCached: " + std::to_string(T) + " tokens after " +
                                std::to_string(cache.position) + " do not fit the cache's capacity of " +
                                std::to_string(cache.capacity));
  if (cache.rowLengths.defined() && T != 1)
    throw std::invalid_argument("forwardCached: a cache whose rows have their own lengths takes one token at a "
                                "time, got " + std::to_string(T));
  torch::Tensor x = embed_->forward(tokens);  // [B, T, hidden]
  for (size_t i = 0; i < blocks_->size(); ++i)
    x = blocks_->ptr(i)->as<BlockImpl>()->forwardCached(x, cache.layers[i], cache.position, cache.rowLengths);
  cache.position += T;
  if (cache.rowLengths.defined()) cache.rowLengths.add_(1);
  if (lastOnly) x = x.narrow(1, T - 1, 1);         // [B, 1, hidden]
  x = rmsNorm(x, finalNormWeight_);                // [B, T or 1, hidden]
  const torch::Tensor& w = head_ ? head_->weight : embed_->weight;       // [vocab, hidden]
  return torch::linear(x, w.to(x.scalar_type()));                       // [B, T or 1, vocab]
}

torch::Tensor HybridLMImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets, const Documents* documents) {
  torch::Tensor x = profiled(scope::kEmbedding, [&] { return embed_->forward(tokens); });  // [B, T, hidden]
  for (size_t i = 0; i < blocks_->size(); ++i) x = forwardBlock(i, x, documents);
  x = profiled(scope::kNorm, [&] { return rmsNorm(x, finalNormWeight_); });  // [B, T, hidden]
  const torch::Tensor& w = head_ ? head_->weight : embed_->weight;  // [vocab, hidden]
  return profiled(scope::kLmHeadLoss, [&] {
    return ops::linearCrossEntropy(x.reshape({-1, x.size(-1)}), w.to(x.scalar_type()), targets.reshape({-1}));
  });
}

torch::Tensor HybridLMImpl::forwardBlock(size_t index, const torch::Tensor& x, const Documents* documents) {
  BlockImpl* block = blocks_->ptr(index)->as<BlockImpl>();
  if (!checkpointing_) return block->forward(x, documents);
  // In a scope: the block's own scopes take its parts, the rest (the recompute's bookkeeping in
  // backward, the residual adds) is the checkpoint's. The recompute keeps its own copy of the
  // documents (their tensors), as it runs after this call returns.
  std::optional<Documents> kept = documents ? std::optional<Documents>(*documents) : std::nullopt;
  return profiled(scope::kCheckpoint, [&] {
    return checkpointed([block, kept](const torch::Tensor& input) { return block->forward(input, kept ? &*kept : nullptr); },
                        x, block->parameters());
  });
}

int64_t HybridLMImpl::parameterCount() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

int64_t parameterCount(const ModelConfig& config) {
  const auto& p = config.preset;
  int64_t n = p.vocab * p.hidden * (p.tieEmbeddings ? 1 : 2) + p.hidden;  // embeddings, final norm
  const std::vector<bool> attention = config.schedule.expand(p.layers);
  for (int64_t i = 0; i < p.layers; ++i) {
    n += planCount(BlockImpl::plan(p));
    n += planCount(attention[i] ? AttentionMixerImpl::plan(config.attention, p)
                                : LinearMixerImpl::plan(linearKernels(config), p.hidden));
  }
  return n;
}

const runtime::VariantKernels& linearKernels(const ModelConfig& config) {
  const runtime::VariantKernels* kernels = runtime::Registry::find(config.linear.name);
  if (!kernels)
    throw std::invalid_argument("model: no generated code for variant '" + config.linear.name +
                                "' is linked in (generate it with linac compile)");
  return *kernels;
}

}  // namespace linac::model
