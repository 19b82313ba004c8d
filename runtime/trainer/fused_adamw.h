// AdamW through ATen's fused multi-tensor kernel (_fused_adamw_: one pass over every parameter of
// a group, on the CPU and on CUDA), over torch::optim::AdamW's own state: the moments and step
// counts live in the same AdamWParamState, so checkpoints (save / load) and the parameter groups
// are exactly torch::optim::AdamW's. The update is AdamW's (decoupled weight decay, bias
// corrections); the fused kernel rounds differently in the last bits (it interpolates the first
// moment), so it matches torch::optim::AdamW step for step to fp32 rounding, not bit for bit.
//
// stepUnless(skip) lets the device skip a step (a non-finite gradient) without the host reading
// anything: the kernel's found_inf input.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace linac::trainer {

class FusedAdamW : public torch::optim::AdamW {
public:
  FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults);

  /// Whether this LibTorch has a fused AdamW kernel for tensors on `device` (CPU and CUDA do).
  static bool fusedKernelFor(const torch::Device& device);

  /// One step of every group: the fused kernel where it has one for the parameters (fp32 / bf16 /
  /// fp16 on a device fusedKernelFor accepts, no amsgrad), torch::optim::AdamW::step otherwise.
  torch::Tensor step(LossClosure closure = nullptr) override;

  /// A step the device leaves out when `skip` (a float32 0-d tensor on the parameters' device)
  /// is 1: parameters and moments unchanged. On the fused path the step counts on the host
  /// advance either way (they cannot know), so a skipped step is for ending the run, as the
  /// trainer's non-finite check does. Without a fused kernel the flag is read on the host (a
  /// device sync) and the step taken only when it is 0.
  void stepUnless(const torch::Tensor& skip);

private:
  void fusedStep(const torch::Tensor& skip);
};

}  // namespace linac::trainer
