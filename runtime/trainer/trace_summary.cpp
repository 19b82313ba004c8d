#include "trainer/trace_summary.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_map>

namespace linac::trainer {
namespace {

using nlohmann::json;

constexpr const char* kScopePrefix = "linac::";
constexpr const char* kOther = "other";
constexpr double kUsPerMs = 1e3;
constexpr size_t kShownNameChars = 90;  // kernel names are long templates: the start says enough
// Trace times are microseconds with three decimals: an op that ends within a nanosecond of its
// parent's end is inside it.
constexpr double kNestingSlackUs = 1e-3;

/// A host event: an op ("cpu_op"), a record_function scope ("user_annotation"), or a CUDA runtime
/// or driver call (kept only to find the op that made it).
struct HostOp {
  std::string name;
  std::string tid;  // the trace writes thread ids as numbers or strings: compared as text
  double ts = 0, dur = 0;  // microseconds
  int64_t externalId = -1;
  int64_t sequence = -1;   // autograd sequence number, -1 without
  int64_t fwdThread = 0;   // nonzero on backward ops
  bool scope = false;      // "linac::<category>"
  bool runtime = false;    // a runtime / driver call: no host time of its own here
  int parent = -1;         // innermost enclosing host event on the same thread
  double childDur = 0;     // summed duration of the direct children
};

struct DeviceEvent {
  std::string name;
  double dur = 0;
  int64_t externalId = -1;   // the launching op's, when the profiler linked them
  int64_t correlation = -1;  // the runtime call that launched it
};

int64_t intArg(const json& args, const char* key, int64_t fallback) {
  auto it = args.find(key);
  return it != args.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

std::string text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

/// A host event's name, thread and times.
HostOp hostEvent(const json& e) {
  HostOp op;
  op.name = e.value("name", "");
  op.tid = text(e.value("tid", json()));
  op.ts = e.value("ts", 0.0);
  op.dur = e.value("dur", 0.0);
  return op;
}

/// Links each host event to its innermost enclosing event on the same thread.
void nest(std::vector<HostOp>& ops) {
  std::vector<int> order(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) order[i] = int(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (ops[a].tid != ops[b].tid) return ops[a].tid < ops[b].tid;
    if (ops[a].ts != ops[b].ts) return ops[a].ts < ops[b].ts;
    return ops[a].dur > ops[b].dur;  // the enclosing one first
  });
  std::vector<int> open;  // the chain of enclosing events of the current thread
  for (size_t k = 0; k < order.size(); ++k) {
    HostOp& op = ops[order[k]];
    if (k > 0 && ops[order[k - 1]].tid != op.tid) open.clear();
    while (!open.empty() && ops[open.back()].ts + ops[open.back()].dur < op.ts + op.dur - kNestingSlackUs)
      open.pop_back();
    if (!open.empty()) {
      op.parent = open.back();
      if (!op.runtime) ops[open.back()].childDur += op.dur;
    }
    if (!op.runtime) open.push_back(order[k]);
  }
}

/// The category of each host event (the header's rules), memoised.
class Categorizer {
public:
  explicit Categorizer(const std::vector<HostOp>& ops) : ops_(ops), memo_(ops.size()) {
    for (size_t i = 0; i < ops.size(); ++i) {
      const HostOp& op = ops[i];
      if (op.sequence < 0 || op.fwdThread != 0) continue;
      auto [it, inserted] = creator_.emplace(op.sequence, int(i));
      if (!inserted && op.ts >= ops[it->second].ts) it->second = int(i);
    }
  }

  const std::string& of(int i) {
    if (memo_[i]) return *memo_[i];
    memo_[i] = kOther;  // a cycle of links ends here
    const HostOp& op = ops_[i];
    std::string category;
    if (op.scope) {
      category = op.name.substr(std::char_traits<char>::length(kScopePrefix));
    } else if (op.fwdThread != 0 && op.sequence >= 0) {  // a backward node
      auto it = creator_.find(op.sequence);
      if (it != creator_.end() && it->second != i) category = of(it->second);
      if (category == kOther) category.clear();  // the enclosing events may know better
    }
    if (category.empty()) category = op.parent >= 0 ? of(op.parent) : kOther;
    memo_[i] = category;
    return *memo_[i];
  }

private:
  const std::vector<HostOp>& ops_;
  std::vector<std::optional<std::string>> memo_;
  std::unordered_map<int64_t, int> creator_;  // sequence number -> the forward op that created the node
};

std::string shortName(const std::string& name) {
  return name.size() <= kShownNameChars ? name : name.substr(0, kShownNameChars - 3) + "...";
}

}  // namespace

StepProfile summarizeTrace(const json& trace, int64_t steps, size_t topCount, bool device) {
  const auto events = trace.find("traceEvents");
  if (events == trace.end() || !events->is_array())
    throw std::invalid_argument("profile trace: no \"traceEvents\" array");
  std::vector<HostOp> ops;
  std::vector<DeviceEvent> kernels;
  for (const json& e : *events) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("dur")) continue;
    const std::string cat = e.value("cat", "");
    static const json kNoArgs = json::object();
    const json& args = e.contains("args") ? e["args"] : kNoArgs;
    if (cat == "cpu_op" || cat == "user_annotation") {
      HostOp op = hostEvent(e);
      op.externalId = intArg(args, "External id", -1);
      op.sequence = intArg(args, "Sequence number", -1);
      op.fwdThread = intArg(args, "Fwd thread id", 0);
      op.scope = op.name.rfind(kScopePrefix, 0) == 0;
      ops.push_back(std::move(op));
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
      HostOp call = hostEvent(e);
      call.externalId = intArg(args, "correlation", -1);
      call.runtime = true;
      ops.push_back(std::move(call));
    } else if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      kernels.push_back({e.value("name", ""), e.value("dur", 0.0), intArg(args, "External id", -1),
                         intArg(args, "correlation", -1)});
    }
  }
  nest(ops);
  Categorizer categorizer(ops);
  // A device event's launcher: the innermost host op with its External id (the shortest), else
  // the op around the runtime call with its correlation id (the profiler links some launches,
  // e.g. from custom autograd functions, by correlation only).
  std::unordered_map<int64_t, int> byExternalId, byCorrelation;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].externalId < 0) continue;
    if (ops[i].runtime) {
      byCorrelation[ops[i].externalId] = int(i);
      continue;
    }
    auto [it, inserted] = byExternalId.emplace(ops[i].externalId, int(i));
    if (!inserted && ops[i].dur < ops[it->second].dur) it->second = int(i);
  }
  auto launcherOf = [&](const DeviceEvent& k) {
    if (auto it = byExternalId.find(k.externalId); k.externalId >= 0 && it != byExternalId.end()) return it->second;
    if (auto it = byCorrelation.find(k.correlation); k.correlation >= 0 && it != byCorrelation.end())
      return ops[it->second].parent;
    return -1;
  };

  StepProfile profile;
  profile.steps = steps;
  profile.device = device;
  const double perStep = 1.0 / (kUsPerMs * static_cast<double>(steps));
  std::map<std::string, ProfileCategory> categories;
  std::map<std::pair<std::string, std::string>, std::pair<double, int64_t>> entries;  // (name, category) -> (us, calls)
  auto add = [&](const std::string& name, const std::string& category, double us, bool onDevice, bool listed) {
    ProfileCategory& c = categories[category];
    c.name = category;
    (onDevice ? c.deviceMs : c.hostMs) += us * perStep;
    if (listed && onDevice == device) {
      auto& entry = entries[{name, category}];
      entry.first += us;
      ++entry.second;
    }
  };
  for (size_t i = 0; i < ops.size(); ++i)  // host self time: less the ops it encloses
    if (!ops[i].runtime)
      add(ops[i].name, categorizer.of(int(i)), std::max(0.0, ops[i].dur - ops[i].childDur), false, !ops[i].scope);
  for (const DeviceEvent& k : kernels) {
    const int op = launcherOf(k);
    add(k.name, op >= 0 ? categorizer.of(op) : std::string(kOther), k.dur, true, true);
  }

  for (auto& [name, c] : categories)
    if (name != kOther) profile.categories.push_back(c);
  auto time = [&](const ProfileCategory& c) { return device ? c.deviceMs : c.hostMs; };
  std::sort(profile.categories.begin(), profile.categories.end(),
            [&](const ProfileCategory& a, const ProfileCategory& b) { return time(a) > time(b); });
  profile.categories.push_back(categories.count(kOther) ? categories[kOther] : ProfileCategory{kOther, 0, 0});
  for (const auto& [key, value] : entries)
    profile.top.push_back({key.first, key.second, value.first * perStep,
                           std::llround(static_cast<double>(value.second) / static_cast<double>(steps))});
  std::sort(profile.top.begin(), profile.top.end(), [](const ProfileEntry& a, const ProfileEntry& b) { return a.ms > b.ms; });
  if (profile.top.size() > topCount) profile.top.resize(topCount);
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
  for (const auto& c : categories) row(c.name, c.deviceMs, c.hostMs);
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
