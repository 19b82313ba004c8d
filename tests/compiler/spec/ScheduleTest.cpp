// Schedules (text forms, files, expansion) and presets.
#include "TestUtil.h"

namespace linac::spec::test {
namespace {

std::vector<int> attentionIndices(const ScheduleSpec& s, int64_t layers) {
  std::vector<bool> a = s.expand(layers);
  std::vector<int> out;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i]) out.push_back(static_cast<int>(i));
  return out;
}

const SourceLoc kCli{"--schedule", 0, 0};

TEST(Schedule, TextForms) {
  EXPECT_EQ(attentionIndices(parseSchedule("3:1", kCli), 24), (std::vector<int>{3, 7, 11, 15, 19, 23}));
  EXPECT_EQ(attentionIndices(parseSchedule(" 6:1 ", kCli), 24), (std::vector<int>{6, 13, 20}));
  EXPECT_EQ(attentionIndices(parseSchedule("24:1", kCli), 24), (std::vector<int>{23}));  // at least one
  EXPECT_EQ(attentionIndices(parseSchedule("pure", kCli), 4), (std::vector<int>{}));
  EXPECT_EQ(attentionIndices(parseSchedule("transformer", kCli), 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(attentionIndices(parseSchedule("11, 3,7", kCli), 24), (std::vector<int>{3, 7, 11}));
  EXPECT_EQ(attentionIndices(parseSchedule("[1,2]", kCli), 4), (std::vector<int>{1, 2}));
  EXPECT_EQ(parseSchedule("3:1", kCli).ratio, 3);
  EXPECT_EQ(parseSchedule("3:1", kCli).text, "3:1");
}

TEST(Schedule, UnknownText) {
  const std::string tail = "; expected 'R:1' (e.g. '3:1'), 'pure', 'transformer' or a comma-separated list of "
                           "attention layer indices (e.g. '3,7,11')";
  EXPECT_EQ(errorOf([] { parseSchedule("hybrid", kCli); }), "--schedule: error: unknown schedule 'hybrid'" + tail);
  EXPECT_EQ(errorOf([] { loadSchedule("3:2"); }), "--schedule: error: unknown schedule '3:2'" + tail);
  EXPECT_EQ(errorOf([] { parseSchedule("0:1", kCli); }),
            "--schedule: error: schedule ratio must be between 1:1 and 1000000:1, got '0:1'");
  EXPECT_EQ(errorOf([] { parseSchedule("9223372036854775807:1", kCli).expand(24); }),
            "--schedule: error: schedule ratio must be between 1:1 and 1000000:1, got '9223372036854775807:1'");
  EXPECT_EQ(errorOf([] { parseSchedule("3,x", SourceLoc{"s.yaml", 2, 12}); }),
            "s.yaml:2:14: error: attention layer index 'x' in schedule '3,x' is not a non-negative integer");
  EXPECT_EQ(errorOf([] { parseSchedule("3,3", kCli); }), "--schedule: error: attention layer index 3 is listed twice");
  EXPECT_EQ(errorOf([&] { parseScheduleFile(readFixture("bad_schedule.yaml"), "fixtures/bad_schedule.yaml"); }),
            "fixtures/bad_schedule.yaml:2:12: error: unknown schedule '3:2'" + tail);
}

TEST(Schedule, ExplicitIndexOutOfRange) {
  EXPECT_EQ(errorOf([] { parseSchedule("3,30", kCli).expand(24); }),
            "--schedule: error: attention layer index 30 is out of range for a 24-layer model (valid: 0..23)");
  ScheduleSpec s = parseScheduleFile(readFixture("out_of_range_schedule.yaml"), "fixtures/out_of_range_schedule.yaml");
  EXPECT_EQ(attentionIndices(s, 31), (std::vector<int>{3, 30}));
  EXPECT_EQ(errorOf([&] { s.expand(24); }),
            "fixtures/out_of_range_schedule.yaml:2:19: error: attention layer index 30 is out of range for a "
            "24-layer model (valid: 0..23)");
}

TEST(Schedule, LayerCountIsBounded) {
  EXPECT_EQ(errorOf([] { parseSchedule("pure", kCli).expand(0); }),
            "--schedule: error: layer count must be between 1 and 1024, got 0");
  EXPECT_EQ(errorOf([] { parseSchedule("3:1", kCli).expand(int64_t(1) << 40); }),
            "--schedule: error: layer count must be between 1 and 1024, got 1099511627776");
}

TEST(Schedule, TextExpansionForTheDialectHasTheSameMeaningAndMessages) {
  // linac.model's verifier uses expandScheduleText: what the front end
  // accepts it accepts, and what it rejects it rejects with the same message.
  std::string error;
  for (const char* text : {"3:1", "24:1", "pure", "transformer", "3,7", "[1, 2]"})
    EXPECT_EQ(expandScheduleText(text, 24, error), parseSchedule(text, kCli).expand(24)) << text;
  for (auto [text, layers] : {std::pair<const char*, int64_t>{"3,30", 24}, {"3:2", 24}, {"0:1", 24}, {"3,3", 24},
                              {"pure", 0}, {"", 4}}) {
    error.clear();
    EXPECT_EQ(expandScheduleText(text, layers, error), std::nullopt) << text;
    EXPECT_EQ("--schedule: error: " + error, errorOf([&] { parseSchedule(text, kCli).expand(layers); })) << text;
  }
}

TEST(Schedule, Files) {
  const std::string dir = std::string(LINAC_SPECS_DIR) + "/schedules/";
  EXPECT_EQ(loadSchedule(dir + "3to1.yaml").ratio, 3);
  EXPECT_EQ(loadSchedule(dir + "pure.yaml").kind, ScheduleKind::Pure);
  EXPECT_EQ(loadSchedule(dir + "transformer.yaml").kind, ScheduleKind::Transformer);
  EXPECT_EQ(attentionIndices(loadSchedule(dir + "every8th.yaml"), 24), (std::vector<int>{7, 15, 23}));
  EXPECT_EQ(errorOf([] { loadSchedule("/nonexistent/s.yaml"); }),
            "/nonexistent/s.yaml: error: cannot read file: No such file or directory");
  EXPECT_EQ(errorOf([] { parseScheduleFile("name: x\n", "s.yaml"); }),
            "s.yaml:1:1: error: a schedule file needs exactly one of 'schedule' or 'attention_layers'");
}

TEST(Preset, Files) {
  const std::string dir = std::string(LINAC_SPECS_DIR) + "/presets";
  PresetSpec tiny = loadPreset("tiny", dir);
  EXPECT_EQ(tiny.hidden, 128);
  EXPECT_EQ(tiny.layers, 4);
  EXPECT_EQ(tiny.vocab, 256);
  PresetSpec m340 = loadPreset("340m", dir);
  EXPECT_EQ(m340.hidden, 1024);
  EXPECT_EQ(m340.layers, 24);
  EXPECT_EQ(m340.vocab, 32000);
  EXPECT_EQ(m340.attnHeads, 16);
  PresetSpec b13 = loadPreset(dir + "/1.3b.yaml", "");
  EXPECT_EQ(b13.hidden, 2048);
  EXPECT_EQ(b13.attnHeads, 32);
  EXPECT_EQ(errorOf([&] { loadPreset("tinny", dir); }),
            "--preset: error: unknown preset 'tinny'; did you mean 'tiny'? (valid: 1.3b, 340m, mqar, small, tiny)");
  EXPECT_EQ(errorOf([&] { parsePreset(readFixture("bad_preset.yaml"), "fixtures/bad_preset.yaml"); }),
            "fixtures/bad_preset.yaml:5:13: error: attn_heads 3 does not divide hidden 100");
}

}  // namespace
}  // namespace linac::spec::test
