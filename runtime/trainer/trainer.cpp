// The training loop: steps, evaluation, checkpoints, stop requests.
#include "trainer/trainer.h"

#include "ops/profile_scope.h"
#include "trainer/checkpoint.h"
#include "trainer/device_memory.h"
#include "trainer/file_io.h"
#include "trainer/grad_clip.h"
#include "trainer/metrics.h"
#include "trainer/run_dir.h"
#include "trainer/step_profile.h"

#include <ATen/autocast_mode.h>
#include <nlohmann/json.hpp>

#include <array>

#include <chrono>
#include <cmath>
#include <csignal>
#include <iostream>
#include <limits>
#include <tuple>

namespace linac::trainer {
namespace {

// The first stop signal received during run(), 0 when none.
volatile std::sig_atomic_t gStopSignal = 0;

extern "C" void onStopSignal(int signo) {
  if (gStopSignal == 0)
    gStopSignal = signo;
}

// Installs the stop handlers for the duration of run(): Ctrl-C (SIGINT), and SIGTERM / SIGHUP,
// which schedulers, containers and service managers send. Each finishes the current step,
// checkpoints and returns. SA_RESETHAND restores the default action after the first signal, so
// a second one kills a run stuck inside a long step.
class StopSignalGuard {
public:
  StopSignalGuard() {
    gStopSignal = 0;
    struct sigaction action {};
    action.sa_handler = onStopSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    for (size_t i = 0; i < kSignals.size(); ++i)
      installed_[i] = ::sigaction(kSignals[i], &action, &previous_[i]) == 0;
  }
  ~StopSignalGuard() {
    for (size_t i = 0; i < kSignals.size(); ++i)
      if (installed_[i])
        ::sigaction(kSignals[i], &previous_[i], nullptr);
  }
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> previous_{};
  std::array<bool, 3> installed_{};
};

const char* signalName(int signo) {
  switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

// bf16 autocast around a forward pass on CUDA, as torch.autocast("cuda", torch.bfloat16) does
// in Python: master weights stay fp32, matmuls run in bf16, and backward runs outside the
// region. The previous state is restored so nested or surrounding settings are untouched.
class AutocastGuard {
public:
  explicit AutocastGuard(bool enable) : enabled_(enable) {
    if (!enabled_)
      return;
    previousEnabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    previousDtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_)
      return;
    if (at::autocast::decrement_nesting() == 0)
      at::autocast::clear_cache();  // the cast weights are per forward pass
    at::autocast::set_autocast_enabled(at::kCUDA, previousEnabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, previousDtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

private:
  bool enabled_;
  bool previousEnabled_ = false;
  at::ScalarType previousDtype_ = at::kBFloat16;
};

using Clock = std::chrono::steady_clock;

/// Kernels (ops on the CPU) listed under a profile's table.
constexpr size_t kProfileTopEntries = 15;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A stream window in either data::TokenStream layout -> {inputs [b, seqLen], targets [b, seqLen]}.
std::pair<torch::Tensor, torch::Tensor> splitWindow(const torch::Tensor& window, int64_t seqLen) {
  if (window.dim() == 2 && window.size(1) == seqLen + 1)  // [b, seqLen + 1]: next-token targets
    return {window.slice(1, 0, seqLen), window.slice(1, 1, seqLen + 1)};
  if (window.dim() == 3 && window.size(1) == 2 && window.size(2) == seqLen)  // [b, 2, seqLen]
    return {window.select(1, 0), window.select(1, 1)};
  throw TrainError("a batch must be [b, seqLen + 1] or [b, 2, seqLen] with seqLen " + std::to_string(seqLen) +
                   ", got " + c10::str(window.sizes()));
}

// "nan", "inf", "-inf" or the number: how a non-finite value is named in diagnostics.
std::string valueName(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  return std::to_string(v);
}

void checkConfig(const TrainConfig& c) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok)
      throw TrainError("invalid training config: " + what);
  };
  require(c.steps > 0, "steps must be positive");
  require(c.batch > 0, "batch must be positive");
  require(c.accumulation > 0, "accumulation must be positive");
  require(c.seqLen > 0, "seqLen must be positive");
  require(c.lr > 0, "lr must be positive");
  require(c.warmupSteps >= 0, "warmupSteps must not be negative");
  require(c.minLrRatio >= 0 && c.minLrRatio <= 1, "minLrRatio must be in [0, 1]");
  require(c.logEvery > 0, "logEvery must be positive");
  require(!c.outDir.empty(), "outDir must be set");
}

}  // namespace

Trainer::Trainer(TrainConfig config, std::shared_ptr<torch::nn::Module> module, Forward forward,
                 data::TokenStream& train, torch::Tensor heldOut, TrainHooks hooks)
    : config_(std::move(config)), module_(std::move(module)), forward_(std::move(forward)), train_(train),
      heldOut_(std::move(heldOut)), hooks_(std::move(hooks)), progress_(&std::cout) {
  checkConfig(config_);
  if (!module_ || !forward_)
    throw TrainError("the trainer needs a module and a forward function");
  if (heldOut_.defined() && heldOut_.numel() > 0 &&
      !(heldOut_.dim() == 2 && heldOut_.size(1) == config_.seqLen + 1) &&
      !(heldOut_.dim() == 3 && heldOut_.size(1) == 2 && heldOut_.size(2) == config_.seqLen))
    throw TrainError("held-out windows must be [N, seqLen + 1] = [N, " + std::to_string(config_.seqLen + 1) +
                     "] or [N, 2, seqLen] = [N, 2, " + std::to_string(config_.seqLen) + "], got " +
                     c10::str(heldOut_.sizes()));

  ParamGroups split = splitForWeightDecay(*module_);
  auto options = [&](double weightDecay) {
    return torch::optim::AdamWOptions(config_.lr)
        .betas({config_.beta1, config_.beta2})
        .eps(config_.eps)
        .weight_decay(weightDecay);
  };
  // Group order is part of the checkpoint format: optimizer state is restored by position.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!split.decay.empty())
    groups.emplace_back(split.decay, std::make_unique<torch::optim::AdamWOptions>(options(config_.weightDecay)));
  if (!split.noDecay.empty())
    groups.emplace_back(split.noDecay, std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
  if (groups.empty())
    throw TrainError("the module has no trainable parameters");
  optimizer_ = std::make_unique<FusedAdamW>(std::move(groups), options(config_.weightDecay));
}

Trainer::~Trainer() = default;

void Trainer::requestStop() { stop_ = true; }

void Trainer::trainStep(int64_t step) {
  const double lr = learningRate(config_, step);
  for (auto& group : optimizer_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  ops::scope::profiled(ops::scope::kOptimizer, [&] { optimizer_->zero_grad(/*set_to_none=*/true); });

  const bool autocast = config_.autocast && config_.device.is_cuda();
  PendingStep pending;
  pending.step = step;
  std::vector<torch::Tensor> microLosses;  // [] fp32 each, on the device
  for (int64_t micro = 0; micro < config_.accumulation; ++micro) {
    torch::Tensor window = train_.next(config_.batch);  // on the host
    pending.inputs.push_back(splitWindow(window, config_.seqLen).first);
    // A blocking copy to a GPU waits for the whole stream: copy from pinned memory asynchronously.
    if (config_.device.is_cuda())
      window = window.pin_memory().to(config_.device, /*non_blocking=*/true);
    auto [inputs, targets] = splitWindow(window, config_.seqLen);  // [b, seqLen] each, on the device
    torch::Tensor loss;
    if (loss_) {
      AutocastGuard guard(autocast);
      loss = loss_(inputs, targets);
    } else {
      torch::Tensor logits;
      {
        AutocastGuard guard(autocast);
        logits = forward_(inputs);
      }
      // The loss in fp32 whatever the autocast dtype: log-softmax over a large vocabulary in bf16
      // loses the small probabilities the gradient depends on.
      loss = ops::scope::profiled(ops::scope::kLmHeadLoss, [&] {
        return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32),
                                                    targets.reshape({-1}));
      });
    }
    if (hooks_.beforeBackward)
      hooks_.beforeBackward(micro + 1 == config_.accumulation);
    (loss / static_cast<double>(config_.accumulation)).backward();
    microLosses.push_back(loss.detach());
  }
  const torch::Tensor micro = torch::stack(microLosses).to(torch::kFloat64);  // [accumulation]
  torch::Tensor lossSum = micro.sum();                                          // []
  if (hooks_.afterBackward) {
    // Data parallel: the hook averages the gradients and [loss, stop flag] across ranks, so the
    // stop decision (requestStop / a stop signal) is the same on every rank; run() reads agreedStop_.
    torch::Tensor shared = torch::stack(
        {lossSum, torch::full({}, (stop_ || gStopSignal != 0) ? 1.0 : 0.0, lossSum.options())});
    hooks_.afterBackward(shared);
    lossSum = shared[0];
    agreedStop_ = shared[1].item<double>() > 0;  // every rank must stop at the same step
  }

  // clip_grad_norm_'s rule with the norm left on the device; an infinite max norm only measures it.
  ops::scope::profiled(ops::scope::kOptimizer, [&] {
    const double maxNorm = config_.gradClip > 0 ? config_.gradClip : std::numeric_limits<double>::infinity();
    std::vector<torch::Tensor> params;
    for (const auto& group : optimizer_->param_groups())
      params.insert(params.end(), group.params().begin(), group.params().end());
    const torch::Tensor gradNorm = clipGradNorm(params, maxNorm);  // []
    pending.values = torch::cat({lossSum.reshape({1}), gradNorm.to(torch::kFloat64).reshape({1}), micro});

    // From the first non-finite loss or gradient norm on, every update is skipped on the device.
    const torch::Tensor bad = pending.values.slice(0, 0, 2).isfinite().all().logical_not().to(torch::kFloat32);
    nonFinite_ = torch::maximum(nonFinite_, bad);
    optimizer_->stepUnless(nonFinite_);
  });
  pending_.push_back(std::move(pending));
}

std::pair<double, double> Trainer::readSteps() {
  std::vector<torch::Tensor> rows;
  for (const auto& p : pending_)
    rows.push_back(p.values);
  // [steps, 2 + accumulation] float64: the one device sync of the steps read.
  const torch::Tensor values = torch::stack(rows).to(torch::kCPU);
  const auto v = values.accessor<double, 2>();
  const double accumulation = static_cast<double>(config_.accumulation);
  const bool autocast = config_.autocast && config_.device.is_cuda();
  for (size_t i = 0; i < pending_.size(); ++i) {
    const int64_t row = static_cast<int64_t>(i);
    const double loss = v[row][0] / accumulation, gradNorm = v[row][1];
    if (std::isfinite(loss) && std::isfinite(gradNorm))
      continue;
    // "loss is nan at step 17: first non-finite value in layer 3 (gated_deltanet mixer) output ...":
    // the hook re-runs the forward of the first micro-batch whose loss is non-finite (the last one
    // when only the gradient norm is) at the parameters the step started from (its update and
    // every later one were skipped); the gradients it may inspect are the newest step's.
    const PendingStep& p = pending_[i];
    const bool lossBad = !std::isfinite(loss);
    std::string message = std::string(lossBad ? "loss" : "gradient norm") + " is " +
                          valueName(lossBad ? loss : gradNorm) + " at step " + std::to_string(p.step);
    if (hooks_.locateNonFinite) {
      size_t bad = p.inputs.size() - 1;
      for (size_t m = 0; m < p.inputs.size(); ++m)
        if (!std::isfinite(v[row][2 + static_cast<int64_t>(m)])) {
          bad = m;
          break;
        }
      try {
        AutocastGuard guard(autocast);
        std::string where = hooks_.locateNonFinite(p.inputs[bad].to(config_.device));
        message += ": " + (where.empty() ? std::string("the model found no non-finite value") : where);
      } catch (const std::exception& e) {
        message += std::string(": locating the first non-finite value failed: ") + e.what();
      }
    }
    throw TrainError(message, p.step);
  }
  const int64_t newest = values.size(0) - 1;
  pending_.clear();
  return {v[newest][0] / accumulation, v[newest][1]};
}

void Trainer::setRunFiles(std::vector<RunFile> files) { runFiles_ = std::move(files); }

Trainer::StepMeasurement Trainer::measureStep() {
  module_->train();
  resetPeakAllocated(config_.device);
  const auto start = std::chrono::steady_clock::now();
  pending_.clear();
  nonFinite_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(config_.device));
  trainStep(1);  // a run's first step (its warm-up learning rate)
  readSteps();  // the step's values: a device sync, and a TrainError if one is not finite
  StepMeasurement m;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.peakBytes = peakAllocatedBytes(config_.device);
  return m;
}

EvalStats Trainer::evaluate(int64_t step) { return *evaluateUntilStopped(step, /*interruptible=*/false); }

std::optional<EvalStats> Trainer::evaluateUntilStopped(int64_t step, bool interruptible) {
  if (!heldOut_.defined() || heldOut_.numel() == 0)
    throw TrainError("evaluate: the trainer was given no held-out windows", step);
  struct ModeGuard {  // back to training mode however the evaluation ends
    torch::nn::Module& module;
    bool wasTraining;
    ~ModeGuard() { module.train(wasTraining); }
  } mode{*module_, module_->is_training()};
  module_->eval();
  torch::NoGradGuard noGrad;
  const bool autocast = config_.autocast && config_.device.is_cuda();
  const int64_t windows = heldOut_.size(0);
  const int64_t limit = config_.evalBatches > 0 ? std::min(windows, config_.evalBatches * config_.batch) : windows;
  const int64_t batches = (limit + config_.batch - 1) / config_.batch;
  const Clock::time_point evalStart = Clock::now();
  Clock::time_point lastReport = evalStart;
  double lossSum = 0;
  int64_t tokens = 0;
  const bool explicitTargets = heldOut_.dim() == 3;  // [N, 2, seqLen]: accuracy is reported too
  int64_t correct = 0;
  for (int64_t b = 0; b < batches; ++b) {
    if (interruptible && (stop_ || gStopSignal != 0))
      return std::nullopt;
    const int64_t begin = b * config_.batch;
    torch::Tensor window = heldOut_.slice(0, begin, std::min(begin + config_.batch, limit)).to(config_.device);
    auto [inputs, targetsBT] = splitWindow(window, config_.seqLen);  // [b, seqLen] each
    torch::Tensor targets = targetsBT.reshape({-1});                  // [b * seqLen]
    torch::Tensor logits;
    {
      AutocastGuard guard(autocast);
      logits = forward_(inputs);  // [b, seqLen, V]
    }
    torch::Tensor flat = logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32);  // [b * seqLen, V]
    namespace F = torch::nn::functional;
    lossSum += F::cross_entropy(flat, targets, F::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
    torch::Tensor scored = targets.ne(data::kIgnoreTarget);  // [b * seqLen]; cross_entropy's ignore_index
    tokens += scored.sum().item<int64_t>();
    if (explicitTargets)
      correct += (flat.argmax(-1).eq(targets) & scored).sum().item<int64_t>();
    // A long evaluation says how far it is, so it is not mistaken for a hang.
    if (progress_ && b + 1 < batches && secondsSince(lastReport) >= config_.evalProgressEveryS) {
      const double elapsed = secondsSince(evalStart);
      *progress_ << "eval step " << step << ": batch " << b + 1 << "/" << batches << " | ETA "
                 << detail::formatDuration(elapsed / double(b + 1) * double(batches - b - 1)) << std::endl;
      lastReport = Clock::now();
    }
  }
  EvalStats stats;
  stats.step = step;
  stats.loss = tokens > 0 ? lossSum / static_cast<double>(tokens) : std::nan("");
  stats.ppl = std::exp(stats.loss);
  stats.targets = tokens;
  if (explicitTargets && tokens > 0)
    stats.accuracy = static_cast<double>(correct) / static_cast<double>(tokens);
  return stats;
}

std::string Trainer::saveCheckpoint(int64_t step) {
  detail::CheckpointInfo info;
  info.step = step;
  info.dataPosition = train_.position();
  info.batch = config_.batch;
  info.accumulation = config_.accumulation;
  info.seqLen = config_.seqLen;
  info.configJson = configToJson(config_);
  std::string path = detail::writeCheckpoint(config_.outDir, info, *module_, *optimizer_);
  detail::pruneCheckpoints(config_.outDir, config_.keepCheckpoints, step);
  if (progress_)
    *progress_ << "checkpoint " << path << std::endl;
  return path;
}

TrainResult Trainer::run() {
  // Distributed runs: only the logging rank takes the lock and writes files and progress lines.
  const bool logging = hooks_.isLoggingRank;
  if (!logging)
    progress_ = nullptr;
  std::ostream* notices = logging ? &std::cerr : nullptr;
  std::optional<RunLock> lock;
  if (logging)
    lock.emplace(config_.outDir);

  // The checks (run_dir.h) come before anything in the run directory is touched.
  std::optional<detail::IntactCheckpoint> from;
  if (config_.resume && detail::isDirectory(config_.outDir))
    from = detail::findIntactCheckpoint(config_.outDir, notices);
  // Other ranks make the resume checks too (the same files, read only), so they refuse with
  // rank 0; not a fresh start's, which would race with rank 0 preparing the directory.
  if (logging || from)
    for (const auto& note : detail::checkStart(config_, runFiles_, from ? &from->info : nullptr))
      if (notices)
        *notices << "note: " << note << std::endl;

  TrainResult result;
  int64_t start = 0;
  if (from) {
    const TrainConfig stored = configFromJson(from->info.configJson);
    config_.scheduleSteps = stored.scheduleSteps > 0 ? stored.scheduleSteps : stored.steps;
    const detail::CheckpointInfo loaded = detail::readCheckpoint(from->path, *module_, *optimizer_, config_.device);
    train_.seek(loaded.dataPosition);
    start = loaded.step;  // the generators come from the checkpoint too
  } else {
    if (config_.scheduleSteps <= 0)
      config_.scheduleSteps = config_.steps;
    torch::manual_seed(config_.seed);
  }
  result.step = result.resumedFrom = start;
  // --profile: the steps [profileFirst, profileLast], after a warm-up.
  const int64_t profileFirst = start + kProfileWarmupSteps + 1;
  const int64_t profileLast = profileFirst + config_.profileSteps - 1;
  if (config_.profileSteps > 0 && start < config_.steps && profileLast > config_.steps)
    throw TrainError("profiling " + std::to_string(config_.profileSteps) + " steps after " +
                     std::to_string(kProfileWarmupSteps) + " warm-up steps needs steps >= " +
                     std::to_string(profileLast) + ", got " + std::to_string(config_.steps));
  if (start >= config_.steps) {
    if (progress_)
      *progress_ << "the run in " << config_.outDir << " is complete at step " << start
                 << "; more steps continue it" << std::endl;
    result.lastCheckpoint = from->path;
    return result;
  }

  std::optional<detail::MetricsWriter> metrics;
  if (logging) {
    if (!from)
      detail::prepareFreshStart(config_.outDir, runFiles_);
    detail::removeStaleTemporaries(config_.outDir, runFiles_);
    for (const auto& f : runFiles_)  // a fresh start wrote them all
      if (from && f.everyStart)
        detail::writeFileAtomically(config_.outDir + "/" + f.name, f.contents);
    detail::writeFileAtomically(config_.outDir + "/config.json",
                                nlohmann::ordered_json::parse(configToJson(config_)).dump(2) + "\n");
    metrics.emplace(config_.outDir + "/metrics.jsonl", from ? start : -1);
  }
  if (progress_ && from)
    *progress_ << "resumed from step " << start << " (" << from->path << ")" << std::endl;

  StopSignalGuard signals;
  stop_ = false;
  pending_.clear();
  nonFinite_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(config_.device));
  module_->train();
  const bool canEval = logging && heldOut_.defined() && heldOut_.numel() > 0;
  const double tokensPerStep = static_cast<double>(config_.batch * config_.accumulation * config_.seqLen);
  const Clock::time_point runStart = Clock::now();
  double intervalTrainS = 0;
  int64_t intervalSteps = 0;
  resetPeakAllocated(config_.device);
  std::optional<StepProfiler> profiler;

  try {
    for (int64_t step = start + 1; step <= config_.steps; ++step) {
      if (logging && config_.profileSteps > 0 && step == profileFirst)
        profiler.emplace(config_.device);
      const Clock::time_point stepStart = Clock::now();
      StepStats stats;
      stats.step = step;
      stats.lr = learningRate(config_, step);
      const bool last = step == config_.steps;
      bool stopping = false;
      bool read = false;  // this step's stats hold its loss and gradient norm
      try {
        trainStep(step);
        // The values are read (a device sync) where something reports or acts on them. A step
        // time covers the wait for the device only at a read, so tokens/s holds over the steps
        // between reports.
        auto readValues = [&] {
          std::tie(stats.loss, stats.gradNorm) = readSteps();
          read = true;
        };
        auto finishTiming = [&] {
          intervalTrainS += secondsSince(stepStart);
          ++intervalSteps;
          stats.elapsedS = secondsSince(runStart);
          stats.tokensPerS =
              intervalTrainS > 0 ? tokensPerStep * static_cast<double>(intervalSteps) / intervalTrainS : 0;
        };
        if (hooks_.onStep) {
          readValues();
          finishTiming();
          hooks_.onStep(stats);
        }
        // Distributed (afterBackward set): the ranks' agreed decision, else they would diverge.
        stopping = hooks_.afterBackward ? agreedStop_ : (stop_ || gStopSignal != 0);
        const bool checkpointDue = (config_.checkpointEvery > 0 && step % config_.checkpointEvery == 0) || last;
        const bool evalDue = (config_.evalEvery > 0 && step % config_.evalEvery == 0) || last;
        if (!read) {
          if (step % config_.logEvery == 0 || last || stopping || checkpointDue || (canEval && evalDue))
            readValues();
          finishTiming();
        }
      } catch (const TrainError& e) {
        if (metrics && e.step() >= 0)
          metrics->writeError(e.step(), e.what());  // the non-finite diagnostic, in the run's record too
        throw;
      }
      result.step = step;
      if (read)
        result.lastLoss = stats.loss;
      if (profiler && step == profileLast) {
        const std::string dir = config_.outDir + "/profile";
        detail::makeDirectories(dir);
        const StepProfile profile = profiler->finish(dir + "/trace.json", config_.profileSteps, kProfileTopEntries);
        profiler.reset();
        const std::string table = "steps " + std::to_string(profileFirst) + "-" + std::to_string(profileLast) +
                                  " (trace " + dir + "/trace.json)\n" + profile.table();
        detail::writeFileAtomically(dir + "/table.txt", table);
        if (progress_)
          *progress_ << table << std::flush;
      }

      if (logging && (step % config_.logEvery == 0 || last || stopping)) {
        stats.peakAllocatedBytes = peakAllocatedBytes(config_.device);
        resetPeakAllocated(config_.device);
        metrics->write(stats);
        if (progress_) {
          double perStep = stats.elapsedS / static_cast<double>(step - start);
          *progress_ << detail::progressLine(stats, config_.steps, perStep * static_cast<double>(config_.steps - step))
                     << std::endl;
        }
        intervalTrainS = 0;
        intervalSteps = 0;
      }
      // The checkpoint before the evaluation: a kill during a long evaluation loses no training.
      bool checkpointed = false;
      if (logging && ((config_.checkpointEvery > 0 && step % config_.checkpointEvery == 0) || last || stopping)) {
        result.lastCheckpoint = saveCheckpoint(step);
        checkpointed = true;
      }
      if (canEval && !stopping && ((config_.evalEvery > 0 && step % config_.evalEvery == 0) || last)) {
        // Distributed ranks wait for rank 0's evaluation at the next step's allreduce, so a stop
        // there must be agreed at that step: only a single-process evaluation is cut short.
        if (std::optional<EvalStats> eval = evaluateUntilStopped(step, !hooks_.afterBackward)) {
          metrics->write(*eval, secondsSince(runStart));
          if (progress_) {
            *progress_ << "eval step " << step << " | loss " << eval->loss << " | ppl " << eval->ppl;
            if (!std::isnan(eval->accuracy))
              *progress_ << " | accuracy " << eval->accuracy << " (" << eval->targets << " targets)";
            *progress_ << std::endl;
          }
          if (hooks_.onEval)
            hooks_.onEval(*eval);
          result.lastEval = eval;
        } else {
          stopping = true;
        }
      }
      if (stopping) {
        if (logging && !checkpointed)
          result.lastCheckpoint = saveCheckpoint(step);
        result.interrupted = true;
        result.stopSignal = gStopSignal;
        if (progress_) {
          *progress_ << "stopped at step " << step;
          if (result.stopSignal)
            *progress_ << " by " << signalName(result.stopSignal);
          if (!result.lastCheckpoint.empty())
            *progress_ << "; checkpoint " << result.lastCheckpoint;
          *progress_ << (last ? " (the training is complete; its evaluation was cut short)" : " (resume to continue)")
                     << std::endl;
        }
        break;
      }
    }
  } catch (const TrainError& e) {
    if (e.step() >= 0)
      throw;
    // A file could not be written (a full disk): say what survives.
    std::optional<std::string> latest;
    try {
      latest = detail::latestCheckpoint(config_.outDir);
    } catch (const TrainError&) {
    }
    throw TrainError(std::string(e.what()) + "; " +
                     (latest ? "the last good checkpoint is " + *latest : std::string("no checkpoint was written")));
  }
  return result;
}

}  // namespace linac::trainer
