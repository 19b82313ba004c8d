// The training loop (DESIGN.md section 6): AdamW with decoupled weight decay on matrices only,
// linear warmup then cosine decay to a floor, gradient accumulation and clipping, bf16 autocast
// on CUDA, held-out evaluation, metrics as JSON lines plus a progress line, checksummed atomic
// checkpoints that resume exactly, a clean stop on SIGINT / SIGTERM / SIGHUP, and a clear error
// on a non-finite loss. The run directory (its lock, what a fresh start and a resume check) is
// described in trainer/run_dir.h.
//
// The trainer is model-agnostic: it takes the module (for parameters, buffers and train/eval
// mode) and a forward functor tokens [B, T] -> logits [B, T, V], so any torch::nn::Module works;
// optionally a loss functor (setLoss) that computes the training loss without the logits.
// Batches come in either data::TokenStream layout: language modelling [B, T + 1] (next-token
// targets) or explicit targets [B, 2, T] (e.g. MQAR: loss only on the answers, -100 elsewhere).
//
// The step never waits for the device: the loss, the gradient norm and whether either is
// non-finite stay on the device, and are read back (one sync) only at the steps that report or
// act on them: every logEvery steps, before a checkpoint or an evaluation, at the last step or a
// stop, and at every step when an onStep hook is set. From a non-finite step on, the optimizer
// skips its updates on the device, so the read that finds it reports that step's loss and
// gradient norm and locates it at the parameters the step started from, as if it had stopped
// there. AdamW runs through ATen's fused kernel (trainer/fused_adamw.h).
#pragma once

#include "data/data.h"
#include "trainer/fused_adamw.h"

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace linac::trainer {

/// Everything the trainer reports as a failure (bad config, unreadable checkpoint, non-finite
/// loss). `step()` is the optimizer step it happened at, or -1 when no step was involved.
class TrainError : public std::runtime_error {
public:
  explicit TrainError(const std::string& what, int64_t step = -1)
      : std::runtime_error(what), step_(step) {}
  int64_t step() const { return step_; }

private:
  int64_t step_;
};

struct TrainConfig {
  int64_t steps = 1000;        // optimizer steps in the whole run
  int64_t batch = 8;           // sequences per micro-batch
  int64_t accumulation = 1;    // micro-batches per optimizer step
  int64_t seqLen = 256;        // tokens per sequence (the stream yields seqLen + 1)
  double lr = 3e-4;            // peak learning rate, reached at the end of warmup
  int64_t warmupSteps = 100;
  double minLrRatio = 0.1;     // cosine decays to lr * minLrRatio at the last step
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weightDecay = 0.1;    // matrices only: see splitForWeightDecay
  double gradClip = 1.0;       // max global L2 norm; <= 0 disables clipping
  bool autocast = true;        // bf16 autocast for the forward pass on CUDA; no effect on CPU
  int64_t evalEvery = 0;       // steps between held-out evaluations; 0 = never (except at the end)
  int64_t evalBatches = 0;     // micro-batches of held-out windows per evaluation; 0 = all
  double evalProgressEveryS = 5;  // seconds between progress lines during a long evaluation
  int64_t checkpointEvery = 0; // steps between checkpoints; 0 = only at the end / on a stop signal
  int64_t keepCheckpoints = 3; // newest checkpoints kept on disk; 0 = keep all
  int64_t logEvery = 10;       // steps between metrics lines and progress lines
  std::string outDir = "run";
  uint64_t seed = 0;           // seeds torch's generators at the start of a fresh run
  /// The learning-rate schedule's length (its cosine reaches the floor there); 0 = steps. A
  /// resume keeps the run's, so a run extended with more steps continues at the floor lr.
  int64_t scheduleSteps = 0;
  /// What the training stream reads (a path, a task), as the caller names it: recorded, and a
  /// resume on other data is a change that needs acceptChanges.
  std::string dataSource;
  bool resume = false;         // continue from the newest intact checkpoint in outDir, if any
  bool overwrite = false;      // a fresh start may replace the run in outDir (run_dir.h)
  bool acceptChanges = false;  // a resume may change lr, warmup, seed, data... (run_dir.h)
  torch::Device device = torch::kCPU;
  /// Profile this many optimizer steps after kProfileWarmupSteps more (trainer/step_profile.h):
  /// outDir/profile/trace.json (a Chrome trace) and outDir/profile/table.txt (the step's time by
  /// category, also printed); 0 = no profile. How a run is observed, not part of its record
  /// (config.json, checkpoints).
  int64_t profileSteps = 0;
};

/// The config as one line of JSON (written to outDir/config.json and into each checkpoint).
std::string configToJson(const TrainConfig& config);
/// The inverse of configToJson; throws TrainError naming a missing or mistyped field.
TrainConfig configFromJson(const std::string& json);

/// The learning rate of optimizer step `step` (1-based): linear warmup from lr / warmupSteps to
/// lr over the first warmupSteps steps, then cosine from lr down to lr * minLrRatio at
/// scheduleSteps (or steps), and the floor after it.
double learningRate(const TrainConfig& config, int64_t step);

/// Parameters split for AdamW: weight decay applies to tensors with 2 or more dimensions
/// (projection matrices, embeddings, convolution kernels) and not to 0-D/1-D tensors (norm
/// gains, biases, per-head scalars) - decaying those pulls them towards zero rather than
/// regularizing, and the rule needs no naming convention from the model.
struct ParamGroups {
  std::vector<torch::Tensor> decay;
  std::vector<torch::Tensor> noDecay;
  std::vector<std::string> decayNames;
  std::vector<std::string> noDecayNames;
};
ParamGroups splitForWeightDecay(const torch::nn::Module& module);

/// Reported after every optimizer step to the onStep hook, and written every logEvery steps.
struct StepStats {
  int64_t step = 0;
  double loss = 0;        // mean training loss over the step's micro-batches
  double lr = 0;
  double gradNorm = 0;    // global L2 norm before clipping
  double tokensPerS = 0;  // over the steps since the previous report
  double elapsedS = 0;    // wall time since this process started training
  /// The device memory allocated at its peak since the previous report (a CUDA device's caching
  /// allocator: trainer/device_memory.h); set at the steps that write a metrics line, never on
  /// the CPU.
  std::optional<int64_t> peakAllocatedBytes;
};

struct EvalStats {
  int64_t step = 0;
  double loss = 0;  // mean per-token cross entropy on the held-out windows' targeted tokens
  double ppl = 0;
  /// With explicit-target held-out windows [N, 2, T] (e.g. MQAR): the fraction of targeted
  /// positions whose argmax prediction is the target; NaN for language-modelling windows.
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  int64_t targets = 0;  // targeted (scored) positions
};

struct TrainResult {
  int64_t step = 0;          // optimizer steps completed (including those before a resume)
  int64_t resumedFrom = 0;   // the checkpoint's step, 0 for a fresh run
  /// Stopped early by SIGINT / SIGTERM / SIGHUP or requestStop() (a checkpoint was written
  /// first); also when a signal cut the end-of-run evaluation short.
  bool interrupted = false;
  int stopSignal = 0;        // the signal that stopped this process; 0 for requestStop()
  double lastLoss = 0;
  std::optional<EvalStats> lastEval;
  std::string lastCheckpoint;  // path of the newest checkpoint written, empty if none
};

struct TrainHooks {
  /// After each optimizer step; may call Trainer::requestStop() or raise SIGINT / SIGTERM / SIGHUP.
  /// Setting it reads the step's loss and gradient norm back at every step (a device sync).
  std::function<void(const StepStats&)> onStep;
  /// After each evaluation.
  std::function<void(const EvalStats&)> onEval;
  /// Called when the loss or gradient norm is non-finite, with the inputs [b, T] of the first
  /// micro-batch whose loss was non-finite (of the step's last one when only the gradient norm
  /// is), after its backward, under the forward's autocast. Returns where the first non-finite
  /// value is (e.g. model::HybridLMImpl::locateNonFinite: "first non-finite value in layer 3
  /// (gated_deltanet mixer) output ..."), appended to the error message and the metrics line.
  std::function<std::string(const torch::Tensor& inputs)> locateNonFinite;
  /// Data-parallel training (runtime/distributed): called once per optimizer step after the
  /// accumulation micro-batches' backward passes and before clipping, with `shared` = a float64
  /// vector on the device [summed micro-batch loss, 1 if this rank was asked to stop else 0]. The
  /// hook averages the gradients and `shared` (in place) across ranks, so clipping, the optimizer
  /// and the logged loss see global values and every rank stops (a stop signal) at the same step.
  /// The stop flag is read back at every step (the one device sync of a distributed step).
  std::function<void(torch::Tensor& shared)> afterBackward;
  /// Data-parallel training with communication overlapped with backward: called just before each
  /// micro-batch's backward, with whether it is the step's last one (the gradient hooks start
  /// averaging buckets during that backward only; afterBackward then completes the averaging).
  std::function<void(bool lastMicroBatch)> beforeBackward;
  /// False on every rank but 0 of a distributed run: that rank takes no lock and writes no
  /// metrics, progress lines, config.json, run files or checkpoints, and skips evaluation (all
  /// ranks still make the start checks and load a checkpoint on resume).
  bool isLoggingRank = true;
};

/// Loads only the model's parameters and buffers from a checkpoint written by Trainer (for
/// evaluation), after checking its bytes against its manifest; returns the checkpoint's step.
/// Throws TrainError naming the path.
int64_t loadModelWeights(const std::string& path, torch::nn::Module& module, const torch::Device& device);

/// Writes `module`'s parameters as checkpoint `step` of the run in `outDir` (ckpt-<step>.pt, its
/// manifest and `latest`, as Trainer writes them, with an AdamW of empty state), for a run whose
/// weights come from elsewhere (`linac import`); eval and generate load it with loadModelWeights.
/// Returns the checkpoint's path; throws TrainError.
std::string writeModelCheckpoint(const std::string& outDir, const TrainConfig& config, int64_t step,
                                 torch::nn::Module& module);

/// The newest intact checkpoint of a run directory: from the one `latest` names down by step,
/// the first whose bytes match its manifest. Each damaged one skipped is reported on `notices`
/// (may be null). Throws TrainError when the directory has none, naming what is wrong with each.
std::string latestIntactCheckpoint(const std::string& runDir, std::ostream* notices);

/// A file that describes the run, which the caller (`linac train`) wants in the run directory:
/// the model's description, copies of its inputs. `name` is relative to the directory
/// ("model.json", "inputs/spec.yaml").
struct RunFile {
  std::string name;
  std::string contents;
  /// Part of the run's identity: on resume the stored file must equal `contents` (a JSON object
  /// field by field, ignoring fields named "source": where an input was read from may change,
  /// what it says may not). The other run files are written on a fresh start only, unless
  /// everyStart.
  bool identity = false;
  /// Rewritten at every start, a resumed one too (what this start was asked to do).
  bool everyStart = false;
};

class Trainer {
public:
  using Forward = std::function<torch::Tensor(const torch::Tensor& tokens)>;
  /// (inputs [b, T], targets [b, T] with -100 where nothing is scored) -> the mean cross-entropy
  /// over the scored targets, a 0-d fp32 tensor (e.g. model::HybridLMImpl::loss, which never
  /// materialises the logits).
  using Loss = std::function<torch::Tensor(const torch::Tensor& inputs, const torch::Tensor& targets)>;

  /// `heldOut` is [N, seqLen + 1] int64 windows, or [N, 2, seqLen] (inputs, targets with -100
  /// where nothing is scored; evaluation then reports accuracy too); may be undefined or empty
  /// (no evaluation).
  /// The module must already be on config.device. The caller seeds torch before building the
  /// module if initialization should be reproducible; the trainer seeds again at the start of a
  /// fresh run so dropout etc. follow config.seed.
  Trainer(TrainConfig config, std::shared_ptr<torch::nn::Module> module, Forward forward,
          data::TokenStream& train, torch::Tensor heldOut = {}, TrainHooks hooks = {});
  ~Trainer();

  /// Files the caller wants in the run directory (run_dir.h): written on a fresh start, those
  /// marked identity compared with the stored ones on resume.
  void setRunFiles(std::vector<RunFile> files);

  /// The training loss; without it, torch's cross_entropy of forward's logits (in fp32).
  /// Evaluation always scores forward's logits (it reports accuracy from them).
  void setLoss(Loss loss) { loss_ = std::move(loss); }

  /// Takes the run directory's lock, makes the start checks of run_dir.h (RunRefused when they
  /// fail, before anything in the directory is touched), then trains to config.steps or until
  /// stopped. The final checkpoint is written before the end-of-run evaluation. Throws
  /// TrainError on a non-finite loss or gradient norm ("loss is nan at step 17: ..."), after
  /// writing the message to metrics.jsonl, and when a file cannot be written ("no space left on
  /// device writing ..."; the last good checkpoint stays).
  TrainResult run();

  /// Held-out loss over evalBatches micro-batches, in eval mode without gradients.
  EvalStats evaluate(int64_t step);

  /// Finish the current step, checkpoint and return from run(); safe from any thread.
  void requestStop();

  /// One optimizer step at config.batch outside any run: no run directory, checkpoint, metrics or
  /// progress line. Its values are read back (a device sync) and checked finite. The device's peak
  /// is taken from this step alone (nullopt on the CPU). For finding the batch that fits
  /// (batch_fit.h); an out-of-memory error reaches the caller as c10::OutOfMemoryError.
  struct StepMeasurement {
    double seconds = 0.0;
    std::optional<int64_t> peakBytes;
  };
  StepMeasurement measureStep();

  /// Where progress lines go (default std::cout); nullptr silences them.
  void setProgressStream(std::ostream* out) { progress_ = out; }

  const TrainConfig& config() const { return config_; }
  torch::optim::AdamW& optimizer() { return *optimizer_; }

private:
  /// A step's values, on the device until the next readSteps().
  struct PendingStep {
    int64_t step = 0;
    torch::Tensor values;  // [2 + accumulation] float64: summed micro-batch loss, gradient norm, each micro-batch's loss
    std::vector<torch::Tensor> inputs;  // each micro-batch's inputs [b, seqLen] on the host (to locate a non-finite loss)
  };
  /// Queues one optimizer step on the device; reads nothing back (but a distributed stop flag).
  void trainStep(int64_t step);
  /// Reads the pending steps' values back (one device sync) and returns the newest step's mean
  /// loss and gradient norm; throws TrainError naming the first non-finite one and its step.
  std::pair<double, double> readSteps();
  std::string saveCheckpoint(int64_t step);
  /// evaluate(); with `interruptible`, nullopt when a stop is requested during it.
  std::optional<EvalStats> evaluateUntilStopped(int64_t step, bool interruptible);

  TrainConfig config_;
  std::shared_ptr<torch::nn::Module> module_;
  Forward forward_;
  data::TokenStream& train_;
  torch::Tensor heldOut_;
  TrainHooks hooks_;
  Loss loss_;
  std::unique_ptr<FusedAdamW> optimizer_;
  std::vector<PendingStep> pending_;
  torch::Tensor nonFinite_;  // float32 [] on the device: 1 from the first non-finite step on
  std::vector<RunFile> runFiles_;
  std::ostream* progress_;
  std::atomic<bool> stop_{false};
  bool agreedStop_ = false;  // with afterBackward: some rank was asked to stop during this step
};

}  // namespace linac::trainer
