// trainer/trace_summary.h on small traces written in the shape LibTorch's Kineto profiler saves
// (the H200 trace of a 340m Gated DeltaNet step had each of these cases): a kernel linked to its
// op by External id, one linked only through its runtime call's correlation id (the chunk
// kernel's launches), a backward kernel charged through its autograd node's sequence number to
// the forward scope, host self time less the enclosed ops, and per-step division.
#include "trainer/trace_summary.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <stdexcept>
#include <string>

namespace linac::trainer {
namespace {

using nlohmann::json;

json op(const std::string& cat, const std::string& name, int tid, double ts, double dur, json args = json::object()) {
  return {{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 1}, {"tid", tid}, {"ts", ts}, {"dur", dur}, {"args", args}};
}

/// Two steps of: forward scope "mixer_kernel" (thread 1) around an op that launches kernel A
/// (External id) and a custom-function op whose kernel B is linked by correlation only; a
/// "norm" scope whose op launches kernel C; on thread 2 the backward node of the mixer's forward
/// op (same sequence number) launching kernel D; an unlinked memset E.
json twoSteps() {
  json events = json::array();
  for (int step = 0; step < 2; ++step) {
    const double t0 = 1000.0 * step;
    const int seq = 10 + step, base = 100 * step;
    events.push_back(op("user_annotation", "linac::mixer_kernel", 1, t0, 100, {{"External id", base + 1}, {"Sequence number", seq}, {"Fwd thread id", 0}}));
    events.push_back(op("cpu_op", "aten::mm", 1, t0 + 10, 20, {{"External id", base + 2}}));
    events.push_back(op("cuda_runtime", "cudaLaunchKernel", 1, t0 + 15, 5, {{"External id", base + 2}, {"correlation", base + 50}}));
    events.push_back(op("cpu_op", "RecurrenceFunction", 1, t0 + 40, 30, {{"External id", base + 3}}));
    events.push_back(op("cuda_runtime", "cudaLaunchKernel", 1, t0 + 50, 5, {{"correlation", base + 51}}));
    events.push_back(op("user_annotation", "linac::norm", 1, t0 + 200, 50, {{"External id", base + 4}}));
    events.push_back(op("cpu_op", "aten::mul", 1, t0 + 210, 10, {{"External id", base + 5}}));
    events.push_back(op("cpu_op", "autograd::engine::evaluate_function: RecurrenceBackward", 2, t0 + 500, 60,
                        {{"External id", base + 6}, {"Sequence number", seq}, {"Fwd thread id", 1}}));
    events.push_back(op("cpu_op", "RecurrenceBackward", 2, t0 + 505, 40, {{"External id", base + 7}, {"Sequence number", seq}, {"Fwd thread id", 1}}));
    events.push_back(op("kernel", "kernelA", 0, t0 + 20, 8, {{"External id", base + 2}, {"correlation", base + 50}}));
    events.push_back(op("kernel", "kernelB", 0, t0 + 60, 30, {{"correlation", base + 51}}));
    events.push_back(op("kernel", "kernelC", 0, t0 + 220, 4, {{"External id", base + 5}}));
    events.push_back(op("kernel", "kernelD", 0, t0 + 520, 50, {{"External id", base + 7}}));
    events.push_back(op("gpu_memset", "Memset", 0, t0 + 600, 2));
  }
  return {{"traceEvents", events}};
}

std::map<std::string, ProfileCategory> byName(const StepProfile& p) {
  std::map<std::string, ProfileCategory> out;
  for (const auto& c : p.categories) out[c.name] = c;
  return out;
}

TEST(TraceSummary, ChargesEveryKernelToTheScopeThatLaunchedIt) {
  const StepProfile p = summarizeTrace(twoSteps(), 2, 10, true);
  auto c = byName(p);
  // per step: A 8 us + B 30 us (forward) + D 50 us (backward) in the mixer; C 4 us in norm; E other
  EXPECT_NEAR(c["mixer_kernel"].deviceMs, 0.088, 1e-9);
  EXPECT_NEAR(c["norm"].deviceMs, 0.004, 1e-9);
  EXPECT_NEAR(c["other"].deviceMs, 0.002, 1e-9);
  EXPECT_EQ(p.categories.back().name, "other") << "other comes last";
  EXPECT_EQ(p.categories.front().name, "mixer_kernel") << "largest first";
  ASSERT_FALSE(p.top.empty());
  EXPECT_EQ(p.top.front().name, "kernelD");
  EXPECT_EQ(p.top.front().category, "mixer_kernel");
  EXPECT_EQ(p.top.front().calls, 1);
  EXPECT_NEAR(p.top.front().ms, 0.050, 1e-9);
}

TEST(TraceSummary, HostSelfTimeLeavesOutEnclosedOpsButNotRuntimeCalls) {
  const StepProfile p = summarizeTrace(twoSteps(), 2, 10, false);
  auto c = byName(p);
  // mixer per step: scope self 100 - 20 - 30 = 50, mm 20, RecurrenceFunction 30 (its launch call
  // stays in its self time), backward node 60 - 40 = 20 and its op 40.
  EXPECT_NEAR(c["mixer_kernel"].hostMs, 0.160, 1e-9);
  EXPECT_NEAR(c["norm"].hostMs, 0.050, 1e-9);
  ASSERT_FALSE(p.top.empty());
  EXPECT_EQ(p.top.front().name, "RecurrenceBackward") << "host ops by self time, 40 us a step";
  EXPECT_EQ(p.top.front().category, "mixer_kernel");
  for (const auto& t : p.top) EXPECT_NE(t.name.rfind("linac::", 0), 0u) << "scopes are not listed as ops";
}

TEST(TraceSummary, RefusesATraceWithoutEvents) {
  EXPECT_THROW(summarizeTrace(json::object(), 1, 5, false), std::invalid_argument);
  EXPECT_THROW(summarizeTrace(json{{"traceEvents", 3}}, 1, 5, false), std::invalid_argument);
}

}  // namespace
}  // namespace linac::trainer
