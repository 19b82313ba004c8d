// Bucketed gradient averaging, overlapped with backward through per-parameter gradient hooks.
#include "distributed/grad_reducer.h"

#include <algorithm>
#include <stdexcept>

namespace linac::distributed {
namespace {

void waitFor(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  try {
    if (!work->wait())
      throw std::runtime_error("distributed: " + what + " failed");
  } catch (const std::runtime_error&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error("distributed: " + what + " failed: " + e.what());
  }
}

}  // namespace

GradientReducer::GradientReducer(torch::nn::Module& module, DistContext ctx, GradSyncOptions options)
    : ctx_(std::move(ctx)), options_(options) {
  if (options_.bucketBytes < 0)
    throw std::invalid_argument("GradientReducer: bucketBytes must not be negative");
  auto named = module.named_parameters(/*recurse=*/true);
  for (size_t i = named.size(); i-- > 0;)  // reverse registration order
    if (named[i].value().requires_grad())
      slots_.push_back(Slot{named[i].value(), named[i].key()});

  // Buckets of consecutive slots, split where the dtype or device changes or the size would pass
  // bucketBytes; every rank builds the same buckets from the same parameter list.
  int64_t bytes = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const torch::Tensor& p = slots_[i].param;
    const int64_t size = p.numel() * static_cast<int64_t>(p.element_size());
    bool fresh = buckets_.empty();
    if (!fresh) {
      const torch::Tensor& first = slots_[buckets_.back().slots.front()].param;
      fresh = first.scalar_type() != p.scalar_type() || first.device() != p.device() ||
              bytes + size > options_.bucketBytes;
    }
    if (fresh) {
      buckets_.emplace_back();
      bytes = 0;
    }
    slots_[i].bucket = buckets_.size() - 1;
    buckets_.back().slots.push_back(i);
    bytes += size;
  }
  for (Bucket& b : buckets_) {
    int64_t numel = 0;
    for (size_t s : b.slots) {
      slots_[s].offset = numel;
      numel += slots_[s].param.numel();
    }
    const torch::Tensor& first = slots_[b.slots.front()].param;
    b.buffer = torch::zeros({numel}, first.options().requires_grad(false));
  }

  if (options_.overlap && ctx_.worldSize > 1)
    for (size_t i = 0; i < slots_.size(); ++i)
      slots_[i].hook = slots_[i].param.register_hook([this, i](torch::Tensor grad) { onGradient(i, grad); });
}

GradientReducer::~GradientReducer() {
  if (options_.overlap && ctx_.worldSize > 1)
    for (Slot& s : slots_)
      s.param.remove_hook(s.hook);
}

void GradientReducer::reset() {
  for (Slot& s : slots_)
    s.filled = false;
  for (Bucket& b : buckets_) {
    b.filled = 0;
    b.work.reset();
  }
  next_ = 0;
  armed_ = false;
}

void GradientReducer::prepareBackward(bool lastMicroBatch) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (next_ > 0 || armed_)
    throw std::runtime_error("distributed: a gradient accumulation cycle began before the previous one finished "
                             "(GradientReducer::finish was not called after its last micro-batch)");
  armed_ = lastMicroBatch && options_.overlap && ctx_.worldSize > 1;
}

void GradientReducer::onGradient(size_t index, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_)
    return;  // an earlier micro-batch: .grad accumulates locally
  Slot& slot = slots_[index];
  if (slot.filled)
    throw std::runtime_error("distributed: parameter '" + slot.name +
                             "' received a second gradient in one backward after its bucket was filled");
  if (grad.layout() != torch::kStrided || grad.scalar_type() != slot.param.scalar_type() ||
      grad.device() != slot.param.device() || grad.numel() != slot.param.numel())
    throw std::runtime_error("distributed: the gradient of parameter '" + slot.name + "' (" +
                             c10::str(grad.scalar_type(), " ", grad.device(), " ", grad.sizes()) +
                             ") does not match the parameter; dense gradients of its dtype and device are needed");
  torch::NoGradGuard noGrad;
  Bucket& bucket = buckets_[slot.bucket];
  torch::Tensor dst = bucket.buffer.slice(0, slot.offset, slot.offset + grad.numel());
  // AccumulateGrad adds `grad` into .grad after this hook (`.grad += grad`, or .grad = grad when
  // undefined): the slot gets the same sum, computed the same way.
  const torch::Tensor existing = slot.param.grad();
  if (existing.defined())
    torch::add_out(dst, existing.reshape({-1}), grad.reshape({-1}));
  else
    dst.copy_(grad.reshape({-1}));
  slot.filled = true;
  ++bucket.filled;
  launchReady(/*inBackward=*/true);
}

void GradientReducer::fillFromGrad(Slot& slot) {
  torch::Tensor dst = buckets_[slot.bucket].buffer.slice(0, slot.offset, slot.offset + slot.param.numel());
  const torch::Tensor g = slot.param.grad();
  if (!g.defined()) {
    dst.zero_();
  } else {
    if (g.layout() != torch::kStrided)
      throw std::runtime_error("distributed: parameter '" + slot.name + "' has a non-dense gradient");
    dst.copy_(g.reshape({-1}));
  }
  slot.filled = true;
  ++buckets_[slot.bucket].filled;
}

void GradientReducer::launch(Bucket& bucket) {
  std::vector<at::Tensor> one{bucket.buffer};
  bucket.work = ctx_.pg->allreduce(one);
}

void GradientReducer::launchReady(bool inBackward) {
  while (next_ < buckets_.size() && buckets_[next_].filled == buckets_[next_].slots.size()) {
    launch(buckets_[next_++]);
    ++(inBackward ? stats_.launchedInBackward : stats_.launchedAfterBackward);
  }
}

void GradientReducer::finish(torch::Tensor shared) {
  if (ctx_.worldSize == 1)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  torch::NoGradGuard noGrad;
  armed_ = false;
  try {
    // Buckets not yet launched (all of them without overlap), in order: the slots no hook filled
    // take .grad (a parameter unused in the last micro-batch) or zeros (unused in the whole cycle).
    std::vector<double> used(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i)
      used[i] = slots_[i].param.grad().defined() ? 1.0 : 0.0;
    for (size_t b = next_; b < buckets_.size(); ++b)
      for (size_t s : buckets_[b].slots)
        if (!slots_[s].filled)
          fillFromGrad(slots_[s]);
    launchReady(/*inBackward=*/false);

    // One more collective, after the buckets on every rank: [shared..., used flags].
    const torch::Device device = shared.defined() ? shared.device()
                                 : slots_.empty() ? torch::Device(torch::kCPU)
                                                  : slots_.front().param.device();
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device);
    torch::Tensor flags = torch::tensor(used, torch::kFloat64).to(device);
    torch::Tensor head = shared.defined() ? shared.detach().reshape({-1}).to(f64) : torch::empty({0}, f64);
    std::vector<at::Tensor> tail{torch::cat({head, flags})};
    auto tailWork = ctx_.pg->allreduce(tail);

    const double worldSize = static_cast<double>(ctx_.worldSize);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      waitFor(buckets_[b].work, "the gradient allreduce of bucket " + std::to_string(b) + " (from parameter '" +
                                    slots_[buckets_[b].slots.front()].name + "')");
      buckets_[b].buffer.div_(worldSize);
    }
    waitFor(tailWork, "the allreduce of the step's loss and used-parameter flags");
    tail[0].div_(worldSize);
    if (shared.defined())
      shared.detach().copy_(tail[0].slice(0, 0, head.numel()).view_as(shared));
    torch::Tensor globalUsed = tail[0].slice(0, head.numel()).cpu();
    const double* anyRank = globalUsed.data_ptr<double>();

    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (anyRank[i] <= 0)
        continue;  // used on no rank: .grad stays undefined, as in a single process
      torch::Tensor avg = buckets_[slot.bucket].buffer.slice(0, slot.offset, slot.offset + slot.param.numel());
      torch::Tensor& grad = slot.param.mutable_grad();
      if (grad.defined())
        grad.copy_(avg.view_as(grad));
      else  // unused here, used on another rank: the ranks' optimizers must see the same gradient
        grad = avg.view_as(slot.param).clone();
    }
  } catch (...) {
    reset();
    throw;
  }
  reset();
  ++stats_.cycles;
}

void allReduceGradients(torch::nn::Module& module, const DistContext& ctx, int64_t bucketBytes) {
  if (ctx.worldSize == 1)
    return;
  GradientReducer reducer(module, ctx, GradSyncOptions{bucketBytes, /*overlap=*/false});
  reducer.finish();
}

GradientSyncHooks gradientAveragingHooks(std::shared_ptr<torch::nn::Module> module, DistContext ctx,
                                         GradSyncOptions options, std::shared_ptr<GradientReducer>* reducerOut) {
  if (!module)
    throw std::invalid_argument("gradientAveragingHooks: no module");
  // The hooks own the reducer, which holds the parameters (not the module) and their hooks.
  auto reducer = std::make_shared<GradientReducer>(*module, std::move(ctx), options);
  if (reducerOut)
    *reducerOut = reducer;
  GradientSyncHooks hooks;
  hooks.beforeBackward = [reducer](bool last) { reducer->prepareBackward(last); };
  hooks.afterBackward = [reducer](torch::Tensor& shared) { reducer->finish(shared); };
  return hooks;
}

}  // namespace linac::distributed
