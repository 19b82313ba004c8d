// Activation checkpointing (`linac train --checkpointing`): a function of one tensor whose
// intermediate activations are not kept for the backward pass but recomputed in it, as
// torch.utils.checkpoint does in Python (LibTorch has no C++ counterpart). The model applies it
// per block (model.h): a block then keeps only its input until the backward pass.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace linac::model {

using CheckpointFn = std::function<torch::Tensor(const torch::Tensor&)>;

/// fn(x) without fn's intermediate activations: the forward runs fn under NoGradGuard and saves
/// x only; the backward re-runs fn(x) with gradients, under the autocast state (CPU and CUDA:
/// enabled, dtype) and from the random-number state (the CPU generator's and x's device's) the
/// forward had, and back-propagates the incoming gradient through the recomputed graph into x and
/// `params`. `params` must hold every tensor that requires grad which fn reads besides x (a
/// module's parameters): only those receive gradients. fn must stay callable until the backward
/// pass (it is copied). When grad mode is off, or neither x nor any param requires grad, returns
/// fn(x) as is.
torch::Tensor checkpointed(const CheckpointFn& fn, const torch::Tensor& x, const std::vector<torch::Tensor>& params);

}  // namespace linac::model
