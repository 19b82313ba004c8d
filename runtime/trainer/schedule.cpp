// The pure parts of training: the learning-rate schedule, the weight-decay split, the config
// as JSON.
#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <sstream>

namespace linac::trainer {

double learningRate(const TrainConfig& c, int64_t step) {
  if (c.warmupSteps > 0 && step <= c.warmupSteps)
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmupSteps);
  const double floor = c.lr * c.minLrRatio;
  const int64_t decaySteps = c.steps - c.warmupSteps;
  if (decaySteps <= 0)
    return c.lr;
  double progress = static_cast<double>(step - c.warmupSteps) / static_cast<double>(decaySteps);
  progress = std::clamp(progress, 0.0, 1.0);  // steps past the end (a run extended on resume) stay at the floor
  return floor + (c.lr - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

ParamGroups splitForWeightDecay(const torch::nn::Module& module) {
  ParamGroups groups;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad())
      continue;  // frozen tensors need no optimizer state
    if (item.value().dim() >= 2) {
      groups.decay.push_back(item.value());
      groups.decayNames.push_back(item.key());
    } else {
      groups.noDecay.push_back(item.value());
      groups.noDecayNames.push_back(item.key());
    }
  }
  return groups;
}

namespace {
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}
}  // namespace

std::string configToJson(const TrainConfig& c) {
  std::ostringstream o;
  o.precision(17);
  o << "{\"steps\":" << c.steps << ",\"batch\":" << c.batch << ",\"accumulation\":" << c.accumulation
    << ",\"seq_len\":" << c.seqLen << ",\"lr\":" << c.lr << ",\"warmup_steps\":" << c.warmupSteps
    << ",\"min_lr_ratio\":" << c.minLrRatio << ",\"beta1\":" << c.beta1 << ",\"beta2\":" << c.beta2
    << ",\"eps\":" << c.eps << ",\"weight_decay\":" << c.weightDecay << ",\"grad_clip\":" << c.gradClip
    << ",\"autocast\":" << (c.autocast ? "true" : "false") << ",\"eval_every\":" << c.evalEvery
    << ",\"eval_batches\":" << c.evalBatches << ",\"checkpoint_every\":" << c.checkpointEvery
    << ",\"keep_checkpoints\":" << c.keepCheckpoints << ",\"log_every\":" << c.logEvery
    << ",\"out_dir\":" << quoted(c.outDir) << ",\"seed\":" << c.seed
    << ",\"resume\":" << (c.resume ? "true" : "false") << ",\"device\":" << quoted(c.device.str()) << "}";
  return o.str();
}

}  // namespace linac::trainer
