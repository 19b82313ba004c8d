#include "model/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include <array>
#include <mutex>
#include <optional>

namespace linac::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The device types whose autocast state the recompute re-enters.
constexpr std::array<c10::DeviceType, 2> kAutocastDevices = {c10::DeviceType::CPU, c10::DeviceType::CUDA};

struct AutocastState {
  std::array<bool, kAutocastDevices.size()> enabled{};
  std::array<at::ScalarType, kAutocastDevices.size()> dtype{};

  static AutocastState current() {
    AutocastState s;
    for (size_t i = 0; i < kAutocastDevices.size(); ++i) {
      s.enabled[i] = at::autocast::is_autocast_enabled(kAutocastDevices[i]);
      s.dtype[i] = at::autocast::get_autocast_dtype(kAutocastDevices[i]);
    }
    return s;
  }
  void apply() const {
    for (size_t i = 0; i < kAutocastDevices.size(); ++i) {
      at::autocast::set_autocast_dtype(kAutocastDevices[i], dtype[i]);
      at::autocast::set_autocast_enabled(kAutocastDevices[i], enabled[i]);
    }
  }
};

/// Enters the forward's autocast state for the recompute (backward runs outside the forward's
/// autocast region) and restores the surrounding one after it.
class AutocastScope {
public:
  explicit AutocastScope(const AutocastState& state) : previous_(AutocastState::current()) {
    state.apply();
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (at::autocast::decrement_nesting() == 0)
      at::autocast::clear_cache();  // the recompute's cast weights carry its graph: not reused
    previous_.apply();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

private:
  AutocastState previous_;
};

/// No-grad forward: autocast's weight cache stays off, else a cast made here (without a graph)
/// would be reused by a later use of the same weight under grad mode in the same region.
class NoAutocastCache {
public:
  NoAutocastCache() : previous_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~NoAutocastCache() { at::autocast::set_autocast_cache_enabled(previous_); }
  NoAutocastCache(const NoAutocastCache&) = delete;
  NoAutocastCache& operator=(const NoAutocastCache&) = delete;

private:
  bool previous_;
};

/// The states of the generators fn may draw from: the CPU one, and x's device's when it is not
/// the CPU (dropout in a CUDA block draws from the CUDA generator).
struct RngState {
  std::vector<at::Generator> generators;
  std::vector<torch::Tensor> states;

  static RngState capture(const torch::Device& device) {
    RngState s;
    s.generators.push_back(at::detail::getDefaultCPUGenerator());
    if (!device.is_cpu())
      s.generators.push_back(at::globalContext().defaultGenerator(device));
    for (auto& g : s.generators) {
      std::lock_guard<std::mutex> lock(g.mutex());
      s.states.push_back(g.get_state());
    }
    return s;
  }
  void restore() {
    for (size_t i = 0; i < generators.size(); ++i) {
      std::lock_guard<std::mutex> lock(generators[i].mutex());
      generators[i].set_state(states[i]);
    }
  }
};

/// Runs the recompute from the forward's random-number state, then puts back the current one,
/// so the draws after the backward pass are those of a run without checkpointing.
class RngScope {
public:
  RngScope(RngState& forward, const torch::Device& device) : current_(RngState::capture(device)) {
    forward.restore();
  }
  ~RngScope() { current_.restore(); }
  RngScope(const RngScope&) = delete;
  RngScope& operator=(const RngScope&) = delete;

private:
  RngState current_;
};

/// What the backward pass needs besides the saved tensors.
struct Recompute : torch::CustomClassHolder {
  CheckpointFn fn;
  AutocastState autocast;
  RngState rng;
  bool inputRequiresGrad = false;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList params,
                               const CheckpointFn* fn) {
    auto state = c10::make_intrusive<Recompute>();
    state->fn = *fn;
    state->autocast = AutocastState::current();
    state->rng = RngState::capture(x.device());
    state->inputRequiresGrad = x.requires_grad();
    std::vector<torch::Tensor> saved = {x};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(state);
    torch::NoGradGuard noGrad;  // Function::forward runs without grad already; fn must too
    NoAutocastCache noCache;
    return (*fn)(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    auto state = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();  // [x, params...]
    torch::Tensor input = saved[0].detach().requires_grad_(state->inputRequiresGrad);
    torch::Tensor output;
    {
      torch::AutoGradMode enable(true);
      RngScope rng(state->rng, input.device());
      AutocastScope autocast(state->autocast);
      output = state->fn(input);
    }
    // Gradients of what requires them: x when it does, and each parameter that does.
    std::vector<torch::Tensor> wrt;
    std::vector<size_t> slot;  // index into the returned gradients [x, params..., fn]
    if (state->inputRequiresGrad) {
      wrt.push_back(input);
      slot.push_back(0);
    }
    for (size_t i = 1; i < saved.size(); ++i)
      if (saved[i].requires_grad()) {
        wrt.push_back(saved[i]);
        slot.push_back(i);
      }
    variable_list grads(saved.size() + 1);  // the last one: fn, not a tensor
    if (wrt.empty() || !output.requires_grad())
      return grads;
    const variable_list computed = torch::autograd::grad({output}, wrt, {gradOutputs[0]}, /*retain_graph=*/false,
                                                         /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t i = 0; i < computed.size(); ++i)
      grads[slot[i]] = computed[i];
    return grads;
  }
};

}  // namespace

torch::Tensor checkpointed(const CheckpointFn& fn, const torch::Tensor& x, const std::vector<torch::Tensor>& params) {
  bool needsGrad = x.requires_grad();
  for (const auto& p : params)
    needsGrad = needsGrad || p.requires_grad();
  if (!torch::GradMode::is_enabled() || !needsGrad)
    return fn(x);
  return CheckpointFunction::apply(x, at::TensorList(params), &fn);
}

}  // namespace linac::model
