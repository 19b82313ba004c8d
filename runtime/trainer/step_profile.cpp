#include "trainer/step_profile.h"

#include <torch/cuda.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <set>
#include <stdexcept>

namespace linac::trainer {
namespace {

namespace impl = torch::profiler::impl;

constexpr double kNsPerMs = 1e6;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda())
    torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

}  // namespace

StepProfiler::StepProfiler(const torch::Device& device) : device_(device) {
  std::set<impl::ActivityType> activities = {impl::ActivityType::CPU};
  if (device_.is_cuda())
    activities.insert(impl::ActivityType::CUDA);
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  synchronize(device_);  // the queued work of earlier steps is not this profile's
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  running_ = true;
  startNs_ = nowNs();
}

StepProfiler::~StepProfiler() {
  if (running_)
    torch::autograd::profiler::disableProfiler();
}

StepProfile StepProfiler::finish(const std::string& tracePath, int64_t steps, size_t topCount) {
  synchronize(device_);
  const int64_t wallNs = nowNs() - startNs_;
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = torch::autograd::profiler::disableProfiler();
  running_ = false;
  result->save(tracePath);
  std::ifstream in(tracePath);
  if (!in)
    throw std::runtime_error("profile: cannot read back the trace " + tracePath);
  StepProfile profile = summarizeTrace(nlohmann::json::parse(in), steps, topCount, device_.is_cuda());
  profile.wallMs = static_cast<double>(wallNs) / (kNsPerMs * static_cast<double>(steps));
  return profile;
}

}  // namespace linac::trainer
