// The training loop: steps, evaluation, checkpoints, stop requests.
#include "trainer/trainer.h"

#include "trainer/checkpoint.h"
#include "trainer/metrics.h"

#include <ATen/autocast_mode.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

namespace fs = std::filesystem;

namespace linac::trainer {
namespace {

volatile std::sig_atomic_t gSigint = 0;

extern "C" void onSigint(int) { gSigint = 1; }

// Installs the Ctrl-C handler for the duration of run(). SA_RESETHAND restores the default
// action after the first signal, so a second Ctrl-C kills a run stuck inside a long step.
class SigintGuard {
public:
  SigintGuard() {
    gSigint = 0;
    struct sigaction action {};
    action.sa_handler = onSigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    installed_ = ::sigaction(SIGINT, &action, &previous_) == 0;
  }
  ~SigintGuard() {
    if (installed_)
      ::sigaction(SIGINT, &previous_, nullptr);
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

private:
  struct sigaction previous_ {};
  bool installed_ = false;
};

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
  optimizer_ = std::make_unique<torch::optim::AdamW>(std::move(groups), options(config_.weightDecay));
}

Trainer::~Trainer() = default;

void Trainer::requestStop() { stop_ = true; }

double Trainer::trainStep(int64_t step, double& gradNorm) {
  const double lr = learningRate(config_, step);
  for (auto& group : optimizer_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  optimizer_->zero_grad(/*set_to_none=*/true);

  const bool autocast = config_.autocast && config_.device.is_cuda();
  torch::Tensor lossSum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(config_.device));
  std::vector<torch::Tensor> microInputs, microLosses;  // kept to locate a non-finite loss
  for (int64_t micro = 0; micro < config_.accumulation; ++micro) {
    torch::Tensor window = train_.next(config_.batch).to(config_.device);
    auto [inputs, targets] = splitWindow(window, config_.seqLen);  // [b, seqLen] each
    torch::Tensor logits;
    {
      AutocastGuard guard(autocast);
      logits = forward_(inputs);
    }
    // The loss in fp32 whatever the autocast dtype: log-softmax over a large vocabulary in bf16
    // loses the small probabilities the gradient depends on.
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32), targets.reshape({-1}));
    if (hooks_.beforeBackward)
      hooks_.beforeBackward(micro + 1 == config_.accumulation);
    (loss / static_cast<double>(config_.accumulation)).backward();
    lossSum += loss.detach().to(torch::kFloat64);
    microInputs.push_back(inputs);
    microLosses.push_back(loss.detach());
  }
  if (hooks_.afterBackward) {
    // Data parallel: the hook averages the gradients and [loss, stop flag] across ranks, so the
    // stop decision (requestStop / Ctrl-C) is the same on every rank; run() reads agreedStop_.
    torch::Tensor shared = torch::stack(
        {lossSum, torch::full({}, (stop_ || gSigint != 0) ? 1.0 : 0.0, lossSum.options())});
    hooks_.afterBackward(shared);
    lossSum = shared[0];
    agreedStop_ = shared[1].item<double>() > 0;
  }
  // One device sync per step (here and in the clip below), not one per micro-batch.
  const double meanLoss = lossSum.item<double>() / static_cast<double>(config_.accumulation);

  // "loss is nan at step 17: first non-finite value in layer 3 (gated_deltanet mixer) output ...":
  // the hook re-runs the forward of the first micro-batch whose loss is non-finite (the last one
  // when only the gradient norm is) with per-layer checks.
  auto describeNonFinite = [&](const std::string& what, double value) {
    std::string message = what + " is " + valueName(value) + " at step " + std::to_string(step);
    if (hooks_.locateNonFinite) {
      size_t bad = microInputs.size() - 1;
      for (size_t i = 0; i < microLosses.size(); ++i)
        if (!torch::isfinite(microLosses[i]).item<bool>()) {
          bad = i;
          break;
        }
      try {
        AutocastGuard guard(autocast);
        std::string where = hooks_.locateNonFinite(microInputs[bad]);
        message += ": " + (where.empty() ? std::string("the model found no non-finite value") : where);
      } catch (const std::exception& e) {
        message += std::string(": locating the first non-finite value failed: ") + e.what();
      }
    }
    return TrainError(message, step);
  };
  if (!std::isfinite(meanLoss))
    throw describeNonFinite("loss", meanLoss);

  // clip_grad_norm_ returns the norm before clipping; an infinite max norm only measures it.
  const double maxNorm = config_.gradClip > 0 ? config_.gradClip : std::numeric_limits<double>::infinity();
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer_->param_groups())
    params.insert(params.end(), group.params().begin(), group.params().end());
  gradNorm = torch::nn::utils::clip_grad_norm_(params, maxNorm);
  if (!std::isfinite(gradNorm))
    throw describeNonFinite("gradient norm", gradNorm);

  optimizer_->step();
  return meanLoss;
}

EvalStats Trainer::evaluate(int64_t step) {
  if (!heldOut_.defined() || heldOut_.numel() == 0)
    throw TrainError("evaluate: the trainer was given no held-out windows", step);
  const bool wasTraining = module_->is_training();
  module_->eval();
  torch::NoGradGuard noGrad;
  const bool autocast = config_.autocast && config_.device.is_cuda();
  const int64_t windows = heldOut_.size(0);
  const int64_t limit = config_.evalBatches > 0 ? std::min(windows, config_.evalBatches * config_.batch) : windows;
  double lossSum = 0;
  int64_t tokens = 0;
  const bool explicitTargets = heldOut_.dim() == 3;  // [N, 2, seqLen]: accuracy is reported too
  int64_t correct = 0;
  for (int64_t begin = 0; begin < limit; begin += config_.batch) {
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
  }
  module_->train(wasTraining);
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
  detail::pruneCheckpoints(config_.outDir, config_.keepCheckpoints);
  return path;
}

int64_t Trainer::loadLatestCheckpoint() {
  auto path = detail::latestCheckpoint(config_.outDir);
  if (!path)
    return 0;
  detail::CheckpointInfo info = detail::readCheckpoint(*path, *module_, *optimizer_, config_.device);
  // The data position counts windows of this shape; another shape would replay different data.
  if (info.batch != config_.batch || info.accumulation != config_.accumulation || info.seqLen != config_.seqLen)
    throw TrainError("cannot resume from " + *path + ": it was written with batch " + std::to_string(info.batch) +
                     ", accumulation " + std::to_string(info.accumulation) + ", seqLen " +
                     std::to_string(info.seqLen) + "; this run has " + std::to_string(config_.batch) + ", " +
                     std::to_string(config_.accumulation) + ", " + std::to_string(config_.seqLen));
  train_.seek(info.dataPosition);
  return info.step;
}

TrainResult Trainer::run() {
  fs::create_directories(config_.outDir);
  TrainResult result;
  const int64_t start = config_.resume ? loadLatestCheckpoint() : 0;
  if (start == 0)
    torch::manual_seed(config_.seed);  // a resume restores the generators from the checkpoint
  result.step = result.resumedFrom = start;
  // Distributed runs: only the logging rank writes files and progress lines (hooks_.isLoggingRank).
  const bool logging = hooks_.isLoggingRank;
  if (!logging)
    progress_ = nullptr;
  if (logging) {
    std::ofstream(fs::path(config_.outDir) / "config.json", std::ios::trunc) << configToJson(config_) << "\n";
  }
  std::optional<detail::MetricsWriter> metrics;
  if (logging)
    metrics.emplace((fs::path(config_.outDir) / "metrics.jsonl").string(), start);
  if (progress_ && start > 0)
    *progress_ << "resumed from step " << start << " (" << *detail::latestCheckpoint(config_.outDir) << ")\n";

  SigintGuard sigint;
  stop_ = false;
  module_->train();
  const bool canEval = logging && heldOut_.defined() && heldOut_.numel() > 0;
  const double tokensPerStep = static_cast<double>(config_.batch * config_.accumulation * config_.seqLen);
  const Clock::time_point runStart = Clock::now();
  double intervalTrainS = 0;
  int64_t intervalSteps = 0;

  for (int64_t step = start + 1; step <= config_.steps; ++step) {
    const Clock::time_point stepStart = Clock::now();
    StepStats stats;
    stats.step = step;
    stats.lr = learningRate(config_, step);
    try {
      stats.loss = trainStep(step, stats.gradNorm);
    } catch (const TrainError& e) {
      if (metrics && e.step() == step)
        metrics->writeError(step, e.what());  // the non-finite diagnostic, in the run's record too
      throw;
    }
    intervalTrainS += secondsSince(stepStart);
    ++intervalSteps;
    stats.elapsedS = secondsSince(runStart);
    stats.tokensPerS = intervalTrainS > 0 ? tokensPerStep * static_cast<double>(intervalSteps) / intervalTrainS : 0;
    result.step = step;
    result.lastLoss = stats.loss;

    if (hooks_.onStep)
      hooks_.onStep(stats);
    // Distributed (afterBackward set): the ranks' agreed decision, else they would diverge.
    const bool stopping = hooks_.afterBackward ? agreedStop_ : (stop_ || gSigint != 0);
    const bool last = step == config_.steps;

    if (logging && (step % config_.logEvery == 0 || last || stopping)) {
      metrics->write(stats);
      if (progress_) {
        double perStep = stats.elapsedS / static_cast<double>(step - start);
        *progress_ << detail::progressLine(stats, config_.steps, perStep * static_cast<double>(config_.steps - step))
                   << std::endl;
      }
      intervalTrainS = 0;
      intervalSteps = 0;
    }
    if (canEval && ((config_.evalEvery > 0 && step % config_.evalEvery == 0) || last)) {
      EvalStats eval = evaluate(step);
      metrics->write(eval, secondsSince(runStart));
      if (progress_) {
        *progress_ << "eval step " << step << " | loss " << eval.loss << " | ppl " << eval.ppl;
        if (!std::isnan(eval.accuracy))
          *progress_ << " | accuracy " << eval.accuracy << " (" << eval.targets << " targets)";
        *progress_ << std::endl;
      }
      if (hooks_.onEval)
        hooks_.onEval(eval);
      result.lastEval = eval;
    }
    if (logging && ((config_.checkpointEvery > 0 && step % config_.checkpointEvery == 0) || last || stopping))
      result.lastCheckpoint = saveCheckpoint(step);
    if (stopping && !last) {
      if (progress_)
        *progress_ << "stopped at step " << step << "; checkpoint " << result.lastCheckpoint
                   << " (resume to continue)" << std::endl;
      result.interrupted = true;
      break;
    }
  }
  return result;
}

}  // namespace linac::trainer
