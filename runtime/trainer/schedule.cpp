// The pure parts of training: the learning-rate schedule, the weight-decay split, the config
// as JSON (nlohmann-json; numbers round-trip exactly).
#include "trainer/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace linac::trainer {

double learningRate(const TrainConfig& c, int64_t step) {
  if (c.warmupSteps > 0 && step <= c.warmupSteps)
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmupSteps);
  const double floor = c.lr * c.minLrRatio;
  const int64_t decaySteps = (c.scheduleSteps > 0 ? c.scheduleSteps : c.steps) - c.warmupSteps;
  if (decaySteps <= 0)
    return c.lr;
  double progress = static_cast<double>(step - c.warmupSteps) / static_cast<double>(decaySteps);
  progress = std::clamp(progress, 0.0, 1.0);  // steps past the schedule (a run extended on resume) stay at the floor
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

std::string configToJson(const TrainConfig& c) {
  nlohmann::ordered_json j;
  j["steps"] = c.steps;
  j["schedule_steps"] = c.scheduleSteps;
  j["batch"] = c.batch;
  j["accumulation"] = c.accumulation;
  j["seq_len"] = c.seqLen;
  j["lr"] = c.lr;
  j["warmup_steps"] = c.warmupSteps;
  j["min_lr_ratio"] = c.minLrRatio;
  j["beta1"] = c.beta1;
  j["beta2"] = c.beta2;
  j["eps"] = c.eps;
  j["weight_decay"] = c.weightDecay;
  j["grad_clip"] = c.gradClip;
  j["autocast"] = c.autocast;
  j["eval_every"] = c.evalEvery;
  j["eval_batches"] = c.evalBatches;
  j["eval_progress_every_s"] = c.evalProgressEveryS;
  j["checkpoint_every"] = c.checkpointEvery;
  j["keep_checkpoints"] = c.keepCheckpoints;
  j["log_every"] = c.logEvery;
  j["out_dir"] = c.outDir;
  j["seed"] = c.seed;
  j["data_source"] = c.dataSource;
  j["resume"] = c.resume;
  j["overwrite"] = c.overwrite;
  j["accept_changes"] = c.acceptChanges;
  j["device"] = c.device.str();
  return j.dump();
}

TrainConfig configFromJson(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw TrainError(std::string("the stored training config is not valid JSON: ") + e.what());
  }
  if (!j.is_object())
    throw TrainError("the stored training config is not a JSON object");
  TrainConfig c;
  auto read = [&](const char* key, auto& field) {
    auto it = j.find(key);
    if (it == j.end())
      throw TrainError(std::string("the stored training config has no \"") + key + "\"");
    try {
      it->get_to(field);
    } catch (const nlohmann::json::exception&) {
      throw TrainError(std::string("the stored training config's \"") + key + "\" has the wrong type: " + it->dump());
    }
  };
  read("steps", c.steps);
  read("schedule_steps", c.scheduleSteps);
  read("batch", c.batch);
  read("accumulation", c.accumulation);
  read("seq_len", c.seqLen);
  read("lr", c.lr);
  read("warmup_steps", c.warmupSteps);
  read("min_lr_ratio", c.minLrRatio);
  read("beta1", c.beta1);
  read("beta2", c.beta2);
  read("eps", c.eps);
  read("weight_decay", c.weightDecay);
  read("grad_clip", c.gradClip);
  read("autocast", c.autocast);
  read("eval_every", c.evalEvery);
  read("eval_batches", c.evalBatches);
  read("eval_progress_every_s", c.evalProgressEveryS);
  read("checkpoint_every", c.checkpointEvery);
  read("keep_checkpoints", c.keepCheckpoints);
  read("log_every", c.logEvery);
  read("out_dir", c.outDir);
  read("seed", c.seed);
  read("data_source", c.dataSource);
  read("resume", c.resume);
  read("overwrite", c.overwrite);
  read("accept_changes", c.acceptChanges);
  std::string device;
  read("device", device);
  try {
    c.device = torch::Device(device);
  } catch (const std::exception&) {
    throw TrainError("the stored training config's device \"" + device + "\" is not a device");
  }
  return c;
}

}  // namespace linac::trainer
