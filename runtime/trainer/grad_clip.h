// Gradient clipping by the global L2 norm without reading the norm on the host: LibTorch's
// torch::nn::utils::clip_grad_norm_ returns a double, a device sync at every step.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace linac::trainer {

/// Scales the defined gradients of `params` by min(1, maxNorm / (norm + 1e-6)) where norm is
/// their global L2 norm (clip_grad_norm_'s rule; an infinite maxNorm only measures), and returns
/// the norm before clipping as a float32 0-d tensor on the gradients' device (0 without
/// gradients). A non-finite norm makes every gradient non-finite, as clip_grad_norm_ does.
torch::Tensor clipGradNorm(const std::vector<torch::Tensor>& params, double maxNorm);

}  // namespace linac::trainer
