// The hybrid language model built from specs (DESIGN.md section 5): token embedding, a stack of
// blocks [RMSNorm -> mixer -> residual, RMSNorm -> SwiGLU MLP -> residual] where each mixer is
// the spec's linear-attention layer or full attention per the schedule, a final RMSNorm and the
// LM head. Layers follow fla's layer definitions (projections, short conv, gates, norms, init).
#pragma once

#include "linac/Spec/Spec.h"
#include "model/cache.h"
#include "model/documents.h"
#include "registry/registry.h"

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace linac::model {

/// Which implementation the linear mixers run on.
enum class MixerBackend {
  Kernels,  // the generated prologue + CPU/CUDA kernels through runtime/ops (training)
  Oracle,   // float64 naive recurrence + spec expressions evaluated in torch (gradient checks)
};

/// The linear layers are built from the registry's description of the variant named
/// `linear.name` (registry/layer.h); the rest of `linear` is read only by the Oracle backend,
/// whose expressions come from the spec (and by the commands, for names and hashes).
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
  /// tokens [B, T] int64 -> logits [B, T, vocab] (float32, or the autocast dtype). With
  /// `documents` (model/documents.h), each packed document of a row is a sequence of its own: its
  /// logits are those of the document alone.
  torch::Tensor forward(const torch::Tensor& tokens, const Documents* documents = nullptr);
  /// The mean cross-entropy of the next-token predictions for `tokens` [B, T] against `targets`
  /// [B, T] (-100 where nothing is scored): a 0-d fp32 tensor, cross_entropy(forward(tokens) in
  /// fp32, targets) to fp32 rounding, through ops::linearCrossEntropy (the LM head and the loss
  /// in chunks of tokens, their gradients in the same pass), never the [B * T, vocab] logits.
  /// `documents` as for forward().
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets, const Documents* documents = nullptr);
  /// Where a non-finite training loss comes from (the trainer's locateNonFinite hook): re-runs
  /// the forward of `tokens` [B, T] without gradients, checking the embedding output, each
  /// block's mixer and MLP outputs, the final norm and the logits in order, and returns e.g.
  /// "first non-finite value in layer 3 (gated_deltanet mixer) output (12 of 4096 values, first
  /// nan at [0, 5, 17]); non-finite parameter blocks.3.mixer.q_proj" (the parameter part when one
  /// of that stage's parameters is non-finite). When the forward is finite everywhere, says so
  /// and names the first parameter whose value or gradient is non-finite (or that none is).
  std::string locateNonFinite(const torch::Tensor& tokens);
  /// A fresh cache (model/cache.h) for `batch` sequences of at most `capacity` tokens, in the
  /// dtype and on the device of the model's parameters (recurrent states in fp32).
  ModelCache makeCache(int64_t batch, int64_t capacity) const;
  /// tokens [B, T] int64, the next T tokens of the sequences `cache` holds -> logits [B, T, vocab];
  /// updates the cache. T > 1 is a prefill (chunk kernels from the cached state), T = 1 a decode
  /// step; a cache with row lengths (ModelCache::setRowLengths) takes decode steps only, each row
  /// at its own position. The logits equal forward()'s at the same positions of the whole
  /// sequences. Inference only: call it under torch::NoGradGuard. lastOnly: the logits of the last
  /// position alone, [B, 1, vocab] (what generation reads; a long prompt's [B, T, vocab] is large).
  torch::Tensor forwardCached(const torch::Tensor& tokens, ModelCache& cache, bool lastOnly = false);
  int64_t parameterCount() const;
  /// Activation checkpointing per block (`linac train --checkpointing`; model/checkpoint.h): with
  /// gradients on, forward() and loss() keep each block's input only and recompute the block's
  /// forward in the backward pass; the values and gradients are those without it.
  void setCheckpointing(bool enabled) { checkpointing_ = enabled; }
  bool checkpointing() const { return checkpointing_; }
  /// One entry per layer: the linear spec's name or the attention spec's name.
  const std::vector<std::string>& layerNames() const { return layerNames_; }

private:
  /// Called with each stage's output during forward: a label ("layer 3 (gated_deltanet mixer)")
  /// and the parameter-name prefixes that stage reads.
  using Probe = std::function<void(const std::string& label, const std::vector<std::string>& params,
                                   const torch::Tensor& output)>;
  torch::Tensor forwardProbed(const torch::Tensor& tokens, const Probe* probe, const Documents* documents);
  /// Block `index` on x [B, T, hidden], checkpointed when checkpointing is on.
  torch::Tensor forwardBlock(size_t index, const torch::Tensor& x, const Documents* documents);

  ModelConfig config_;
  std::vector<std::string> layerNames_;
  torch::nn::Embedding embed_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::Linear head_{nullptr};
  torch::Tensor finalNormWeight_;
  bool checkpointing_ = false;
};
TORCH_MODULE(HybridLM);

/// The parameter count of the model `config` describes, from shapes alone (nothing is
/// allocated: usable for 1.3B configurations). Equals HybridLM(config)->parameterCount().
int64_t parameterCount(const ModelConfig& config);

/// The registered variant the linear layers of `config` are built from. Throws
/// std::invalid_argument when no generated code for it is linked in.
const runtime::VariantKernels& linearKernels(const ModelConfig& config);

}  // namespace linac::model
