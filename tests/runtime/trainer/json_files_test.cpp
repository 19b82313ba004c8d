// Strings that hand-written JSON gets wrong (quotes, backslashes, control characters, non-ASCII
// letters, bytes that are not UTF-8) through the trainer's JSON: config.json / the checkpoint's
// config (configToJson / configFromJson) and metrics.jsonl (MetricsWriter), read back with
// nlohmann-json as a reader of the files would.
#include "test_support.h"
#include "trainer/metrics.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

using namespace linac::trainer;
using namespace linac::trainer::test;

namespace {

const std::string kAwkward = "q\"uote \\back\\slash\ttab\x01" "ctl\nline \u00fcber \u2713 \xf0\x9f\x98\x80";

TEST(JsonFiles, TheConfigRoundTripsAwkwardPaths) {
  TrainConfig c = tinyConfig(freshDir("json_config") + "/" + kAwkward);
  c.dataSource = "/data/" + kAwkward + ".jsonl";
  const std::string text = configToJson(c);
  EXPECT_EQ(text.find('\n'), std::string::npos) << "one line: " << text;
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("out_dir").get<std::string>(), c.outDir);
  const TrainConfig back = configFromJson(text);
  EXPECT_EQ(back.outDir, c.outDir);
  EXPECT_EQ(back.dataSource, c.dataSource);
  EXPECT_EQ(configToJson(back), text);
}

TEST(JsonFiles, MetricsLinesHoldAwkwardErrorMessages) {
  const std::string dir = freshDir("json_metrics");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/metrics.jsonl";
  {
    linac::trainer::detail::MetricsWriter metrics(path, -1);
    metrics.writeError(3, "cannot write " + kAwkward);
    metrics.writeError(4, "not UTF-8: \xff\xfe end");
  }
  const std::vector<std::string> lines = readLines(path);
  ASSERT_EQ(lines.size(), 2u);  // a newline inside a message stays escaped: one line each
  const nlohmann::json first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first.at("step").get<int64_t>(), 3);
  EXPECT_EQ(first.at("error").get<std::string>(), "cannot write " + kAwkward);
  // Bytes that are not UTF-8 (a Latin-1 path) cannot be JSON: each becomes U+FFFD, the rest stays.
  EXPECT_EQ(nlohmann::json::parse(lines[1]).at("error").get<std::string>(),
            "not UTF-8: \xef\xbf\xbd\xef\xbf\xbd end");
  std::remove(path.c_str());  // not std::filesystem::remove_all: libtorch.so's copy crashes
  std::remove(dir.c_str());
}

}  // namespace
