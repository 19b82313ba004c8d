#include "trainer/step_profile.h"

#include <torch/cuda.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/collection.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

namespace linac::trainer {
namespace {

namespace impl = torch::profiler::impl;
using impl::Result;
using TorchOp = impl::ExtraFields<impl::EventType::TorchOp>;
using KinetoActivity = impl::ExtraFields<impl::EventType::Kineto>;

constexpr const char* kScopePrefix = "linac::";
constexpr const char* kOther = "other";
constexpr double kNsPerMs = 1e6;
constexpr size_t kShownNameChars = 90;  // kernel names are long templates: the start says enough

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda())
    torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

const TorchOp* torchOp(const Result& e) { return std::get_if<TorchOp>(&e.extra_fields_); }
const KinetoActivity* kinetoActivity(const Result& e) { return std::get_if<KinetoActivity>(&e.extra_fields_); }

/// Work that ran on the device: kernels, copies, fills (not the device-side spans of scopes).
bool isDeviceWork(const Result& e) {
  const KinetoActivity* k = kinetoActivity(e);
  if (!k)
    return false;
  switch (k->activity_type_) {
    case libkineto::ActivityType::CONCURRENT_KERNEL:
    case libkineto::ActivityType::GPU_MEMCPY:
    case libkineto::ActivityType::GPU_MEMSET:
      return true;
    default:
      return false;
  }
}

int64_t durationNs(const Result& e) { return std::max<int64_t>(0, e.endTimeNS() - e.start_time_ns_); }

/// The event enclosing `e`: its parent in the profiler's tree, else for a device activity the
/// host activity it is linked to (the launch).
std::shared_ptr<Result> parentOf(const Result& e) {
  if (auto p = e.parent_.lock())
    return p;
  if (const KinetoActivity* k = kinetoActivity(e))
    return k->linked_activity_.lock();
  return nullptr;
}

/// The category of each event (step_profile.h describes the rules).
class Categorizer {
public:
  explicit Categorizer(const std::vector<std::shared_ptr<Result>>& events) {
    // The op that created autograd node (thread, n): of the forward ops that saw sequence number
    // n, the one that started last (the profiler's own rule for its forward-backward links).
    for (const auto& e : events) {
      const TorchOp* op = torchOp(*e);
      if (!op || op->forward_tid_ != 0 || op->sequence_number_ < 0)
        continue;
      auto [it, inserted] = creator_.emplace(std::make_pair(e->start_tid_, op->sequence_number_), e.get());
      if (!inserted && e->start_time_ns_ >= it->second->start_time_ns_)
        it->second = e.get();
    }
  }

  std::string of(const Result* e) {
    if (auto it = memo_.find(e); it != memo_.end())
      return it->second;
    memo_[e] = kOther;  // a cycle of links ends here
    std::string category;
    if (const TorchOp* op = torchOp(*e)) {
      if (op->name_.rfind(kScopePrefix, 0) == 0) {
        category = op->name_.substr(std::strlen(kScopePrefix));
      } else if (op->forward_tid_ != 0 && op->sequence_number_ >= 0) {  // a backward node
        auto it = creator_.find({op->forward_tid_, op->sequence_number_});
        if (it != creator_.end() && it->second != e)
          category = of(it->second);
        if (category == kOther)
          category.clear();  // the enclosing events may know better (a checkpointed block's recompute)
      }
    }
    if (category.empty()) {
      std::shared_ptr<Result> parent = parentOf(*e);
      category = parent ? of(parent.get()) : kOther;
    }
    memo_[e] = category;
    return category;
  }

private:
  std::map<std::pair<uint64_t, int64_t>, const Result*> creator_;
  std::unordered_map<const Result*, std::string> memo_;
};

/// Every event of the profile: the profiler's tree holds its roots, the rest are their descendants.
std::vector<std::shared_ptr<Result>> allEvents(const std::vector<std::shared_ptr<Result>>& roots) {
  std::vector<std::shared_ptr<Result>> out, pending(roots.rbegin(), roots.rend());
  while (!pending.empty()) {
    std::shared_ptr<Result> e = pending.back();
    pending.pop_back();
    out.push_back(e);
    pending.insert(pending.end(), e->children_.rbegin(), e->children_.rend());
  }
  return out;
}

std::string shortName(const std::string& name) {
  return name.size() <= kShownNameChars ? name : name.substr(0, kShownNameChars - 3) + "...";
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

  const std::vector<std::shared_ptr<Result>> events = allEvents(result->event_tree());
  Categorizer categorizer(events);
  std::map<std::string, ProfileCategory> categories;
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> entries;  // (name, category) -> (ns, calls)
  StepProfile profile;
  profile.steps = steps;
  profile.device = device_.is_cuda();
  const double perStep = 1.0 / (kNsPerMs * static_cast<double>(steps));
  for (const auto& e : events) {
    const TorchOp* op = torchOp(*e);
    const bool device = isDeviceWork(*e);
    if (!device && (!op || op->is_async_))
      continue;
    int64_t ns = durationNs(*e);
    if (op)  // host self time: less the ops it called
      for (const auto& child : e->children_)
        if (torchOp(*child))
          ns -= durationNs(*child);
    ns = std::max<int64_t>(0, ns);
    const std::string category = categorizer.of(e.get());
    ProfileCategory& c = categories[category];
    c.name = category;
    (device ? c.deviceMs : c.hostMs) += static_cast<double>(ns) * perStep;
    // The top list: device kernels on a device, host ops without one (never scope events).
    if (device == profile.device && !(op && op->name_.rfind(kScopePrefix, 0) == 0)) {
      auto& entry = entries[{e->name(), category}];
      entry.first += ns;
      ++entry.second;
    }
  }
  profile.wallMs = static_cast<double>(wallNs) * perStep;

  for (auto& [name, c] : categories)
    if (name != kOther)
      profile.categories.push_back(c);
  auto time = [&](const ProfileCategory& c) { return profile.device ? c.deviceMs : c.hostMs; };
  std::sort(profile.categories.begin(), profile.categories.end(),
            [&](const ProfileCategory& a, const ProfileCategory& b) { return time(a) > time(b); });
  ProfileCategory other = categories.count(kOther) ? categories[kOther] : ProfileCategory{kOther, 0, 0};
  profile.categories.push_back(other);

  for (const auto& [key, value] : entries)
    profile.top.push_back({key.first, key.second, static_cast<double>(value.first) * perStep,
                           std::llround(static_cast<double>(value.second) / static_cast<double>(steps))});
  std::sort(profile.top.begin(), profile.top.end(),
            [](const ProfileEntry& a, const ProfileEntry& b) { return a.ms > b.ms; });
  if (profile.top.size() > topCount)
    profile.top.resize(topCount);
  return profile;
}

std::string StepProfile::table() const {
  double deviceTotal = 0, hostTotal = 0;
  for (const auto& c : categories) {
    deviceTotal += c.deviceMs;
    hostTotal += c.hostMs;
  }
  auto share = [](double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; };
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "profile: %lld steps, %.2f ms per step (wall)\n", static_cast<long long>(steps),
                wallMs);
  out += line;
  if (device)
    std::snprintf(line, sizeof line, "%-20s %14s %7s %14s %7s\n", "category", "device ms/step", "share",
                  "host ms/step", "share");
  else
    std::snprintf(line, sizeof line, "%-20s %14s %7s\n", "category", "host ms/step", "share");
  out += line;
  auto row = [&](const std::string& name, double deviceMs, double hostMs) {
    if (device)
      std::snprintf(line, sizeof line, "%-20s %14.3f %6.1f%% %14.3f %6.1f%%\n", name.c_str(), deviceMs,
                    share(deviceMs, deviceTotal), hostMs, share(hostMs, hostTotal));
    else
      std::snprintf(line, sizeof line, "%-20s %14.3f %6.1f%%\n", name.c_str(), hostMs, share(hostMs, hostTotal));
    out += line;
  };
  for (const auto& c : categories)
    row(c.name, c.deviceMs, c.hostMs);
  row("total", deviceTotal, hostTotal);
  out += device ? "top kernels by self device time:\n" : "top ops by self host time:\n";
  std::snprintf(line, sizeof line, "%10s %7s %7s  %-20s %s\n", "ms/step", "share", "calls", "category", "name");
  out += line;
  const double whole = device ? deviceTotal : hostTotal;
  for (const auto& t : top) {
    std::snprintf(line, sizeof line, "%10.3f %6.1f%% %7lld  %-20s %s\n", t.ms, share(t.ms, whole),
                  static_cast<long long>(t.calls), t.category.c_str(), shortName(t.name).c_str());
    out += line;
  }
  return out;
}

}  // namespace linac::trainer
