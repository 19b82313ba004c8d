// The hybrid language model built from specs (DESIGN.md section 5): token embedding, a stack of
// blocks [RMSNorm -> mixer -> residual, RMSNorm -> SwiGLU MLP -> residual] where each mixer is
// the spec's linear-attention layer or full attention per the schedule, a final RMSNorm and the
// LM head. Layers follow fla's layer definitions (projections, short conv, gates, norms, init).
#pragma once

#include "linac/Spec/Spec.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace linac::model {

/// Which implementation the linear mixers run on.
enum class MixerBackend {
  Kernels,  // the generated prologue + CPU/CUDA kernels through runtime/ops (training)
  Oracle,   // float64 naive recurrence + spec expressions evaluated in torch (gradient checks)
};

struct ModelConfig {
  spec::PresetSpec preset;
  spec::VariantSpec linear;     // kind: linear
  spec::VariantSpec attention;  // kind: attention
  spec::ScheduleSpec schedule;
  MixerBackend backend = MixerBackend::Kernels;
};

class HybridLMImpl : public torch::nn::Module {
public:
  explicit HybridLMImpl(const ModelConfig& config);
  /// tokens [B, T] int64 -> logits [B, T, vocab] (float32, or the autocast dtype).
  torch::Tensor forward(const torch::Tensor& tokens);
  int64_t parameterCount() const;
  /// One entry per layer: the linear spec's name or the attention spec's name.
  const std::vector<std::string>& layerNames() const { return layerNames_; }

private:
  ModelConfig config_;
  std::vector<std::string> layerNames_;
  torch::nn::Embedding embed_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::Linear head_{nullptr};
  torch::Tensor finalNormWeight_;
};
TORCH_MODULE(HybridLM);

/// The parameter count of the model `config` describes, from shapes alone (nothing is
/// allocated: usable for 1.3B configurations). Equals HybridLM(config)->parameterCount().
int64_t parameterCount(const ModelConfig& config);

}  // namespace linac::model
