#include "model/model.h"

#include "model/attention_layer.h"
#include "model/layers.h"
#include "model/linear_layer.h"


namespace linac::model {
namespace {

/// One block: x + mixer(RMSNorm(x)), then h + SwiGLU(RMSNorm(h)) (fla's pre-norm blocks).
class BlockImpl : public torch::nn::Module {
public:
  BlockImpl(const ModelConfig& c, int64_t layer, bool attention) {
    if (attention)
      attention_ = register_module("mixer", AttentionMixer(c.attention, c.preset));
    else
      linear_ = register_module("mixer", LinearMixer(c.linear, c.preset.hidden, layer,
                                                      c.preset.layers, c.backend));
    registerPlan(*this, plan(c.preset), params_);
  }

  /// The block's own parameters (norms and MLP; the mixer has its own plan).
  static Plan plan(const spec::PresetSpec& preset) {
    const ParamInit ones = ParamInit::ones();
    Plan p = {{"attn_norm", {preset.hidden}, ones}, {"mlp_norm", {preset.hidden}, ones}};
    for (auto& q : swigluPlan(preset.hidden, intermediateSize(preset), "mlp")) p.push_back(q);
    return p;
  }

  torch::Tensor forward(const torch::Tensor& x) {  // [B, T, hidden]
    torch::Tensor n = rmsNorm(x, params_.at("attn_norm"));
    torch::Tensor h = x + (attention_ ? attention_->forward(n) : linear_->forward(n));
    return h + swiglu(rmsNorm(h, params_.at("mlp_norm")), params_, "mlp");
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

torch::Tensor HybridLMImpl::forward(const torch::Tensor& tokens) {
  torch::Tensor x = embed_->forward(tokens);  // [B, T, hidden]
  for (const auto& block : *blocks_) x = block->as<BlockImpl>()->forward(x);
  x = rmsNorm(x, finalNormWeight_.to(x.scalar_type()));
  const torch::Tensor& w = head_ ? head_->weight : embed_->weight;  // [vocab, hidden]
  return torch::linear(x, w.to(x.scalar_type()));                  // [B, T, vocab]
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
                                : LinearMixerImpl::plan(config.linear, p.hidden));
  }
  return n;
}

}  // namespace linac::model
