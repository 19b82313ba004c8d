// The LanguageModel of a linac HybridLM with its inference caches: generation runs each prompt
// once through the chunk kernels (prefill) and then one decode step per new token
// (runtime/generate), instead of the full-forward model's one whole forward per token, so a RULER
// answer of n tokens after a 4k-token prompt costs one prefill and n steps, not n 4k forwards.
// Scoring needs every position's logits once, so it is the full-forward model's.
#pragma once

#include "model/model.h"
#include "tasks/language_model.h"

#include <memory>

namespace linac::tasks {

/// `lm` (in eval mode, on `device`) must outlive the returned model. Prompts are generated
/// options.batch at a time, sorted by length (each row decodes at its own position).
std::unique_ptr<LanguageModel> makeCachedModel(model::HybridLMImpl& lm, torch::Device device,
                                               FullForwardOptions options = {});

}  // namespace linac::tasks
