// Gradient averaging for data parallelism, overlapped with backward as PyTorch's DDP does.
//
// Parameters (those that require a gradient) are grouped into buckets of at most
// GradSyncOptions::bucketBytes, in reverse registration order (roughly the order in which backward
// produces their gradients), split where the dtype or device changes. Every rank builds the same
// buckets from the same module. Each bucket owns a flat buffer.
//
// Overlap (the default): a hook on every parameter (Tensor::register_hook, which LibTorch runs on
// the incoming gradient BEFORE AccumulateGrad adds it into .grad) writes, on the last micro-batch
// of an accumulation cycle only, (.grad if defined) + incoming into the parameter's slot of its
// bucket - exactly what .grad holds once backward is done. When all slots of a bucket are filled
// and every earlier bucket has been launched, the bucket's asynchronous allreduce (sum) starts
// while backward goes on. Buckets are launched strictly in bucket order, so the ranks' collectives
// match even when gradients arrive in another order or some never arrive. Earlier micro-batches
// only accumulate locally (no communication).
//
// finish() (after backward) fills the slots no hook filled (a parameter unused in the last
// micro-batch) from .grad, or zeros when there is none, launches the remaining buckets in order,
// allreduces [shared..., one used-flag per parameter] in one more collective, waits for all of it,
// divides by the world size and copies each bucket back into .grad. A parameter used on no rank
// keeps an undefined .grad (as in a single-process run: the optimizer skips it); one used on some
// other rank only gets the average. Without overlap, finish() does all of that after backward
// (the same buckets, contents and division: the results are bitwise equal).
#pragma once

#include "distributed/distributed.h"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace linac::distributed {

struct GradSyncOptions {
  int64_t bucketBytes = 25 << 20;  // a bucket closes before passing this (a larger parameter gets its own)
  bool overlap = true;             // false: every bucket is allreduced after backward, in finish()
};

/// Counts since construction, for tests and diagnostics.
struct GradSyncStats {
  int64_t cycles = 0;               // finish() calls
  int64_t launchedInBackward = 0;   // buckets whose allreduce started from a gradient hook
  int64_t launchedAfterBackward = 0;  // buckets whose allreduce started in finish()
};

class GradientReducer {
public:
  /// Holds `module`'s parameters; they must keep their dtype and device from now on.
  GradientReducer(torch::nn::Module& module, DistContext ctx, GradSyncOptions options = {});
  ~GradientReducer();  // removes the gradient hooks
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before each micro-batch's backward: on the last one of the accumulation cycle the hooks
  /// start filling and launching buckets; on the others they do nothing.
  void prepareBackward(bool lastMicroBatch);

  /// After the cycle's backward passes: launches what is left, waits, averages the gradients and
  /// `shared` (float64, any shape; may be undefined) in place. Throws std::runtime_error with context.
  void finish(torch::Tensor shared = {});

  size_t bucketCount() const { return buckets_.size(); }
  const GradSyncStats& stats() const { return stats_; }

private:
  struct Slot {
    torch::Tensor param;
    std::string name;
    size_t bucket = 0;
    int64_t offset = 0;  // in elements, within the bucket's buffer
    bool filled = false;
    unsigned hook = 0;
  };
  struct Bucket {
    torch::Tensor buffer;        // flat, the parameters' dtype and device
    std::vector<size_t> slots;   // indices into slots_
    size_t filled = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };

  void onGradient(size_t slot, const torch::Tensor& grad);  // the hook
  void fillFromGrad(Slot& slot);                             // .grad or zeros
  void launchReady(bool inBackward);                         // in order, while the next is full
  void launch(Bucket& bucket);
  void reset();

  DistContext ctx_;
  GradSyncOptions options_;
  std::vector<Slot> slots_;      // reverse registration order
  std::vector<Bucket> buckets_;
  size_t next_ = 0;              // the first bucket not yet launched in this cycle
  bool armed_ = false;           // hooks active (last micro-batch of a cycle, overlap on)
  std::mutex mutex_;             // hooks may run on autograd's device threads
  GradSyncStats stats_;
};

/// One-shot, non-overlapped averaging of `module`'s gradients (the same buckets and arithmetic
/// as GradientReducer without overlap).
void allReduceGradients(torch::nn::Module& module, const DistContext& ctx, int64_t bucketBytes = 25 << 20);

/// The trainer's hooks (trainer::TrainHooks::beforeBackward / afterBackward) for data
/// parallelism: a GradientReducer over `module` (prepareBackward, then finish(shared), which also
/// averages the step's [loss sum, stop flag]). `reducer`, when given, receives it (for its stats).
struct GradientSyncHooks {
  std::function<void(bool lastMicroBatch)> beforeBackward;
  std::function<void(torch::Tensor& shared)> afterBackward;
};
GradientSyncHooks gradientAveragingHooks(std::shared_ptr<torch::nn::Module> module, DistContext ctx,
                                         GradSyncOptions options = {},
                                         std::shared_ptr<GradientReducer>* reducer = nullptr);

}  // namespace linac::distributed
