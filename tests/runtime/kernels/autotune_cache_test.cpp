// The autotune cache's file (kernels/common/autotune_cache.h): lines written by one process are
// read back by the next, later lines override earlier ones, a different build or GPU misses, and
// malformed lines are skipped. The timing itself needs a GPU (kernels/cuda/autotune.cu; the
// kernel lab runs it).
#include "kernels/common/autotune_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace linac::kernels {
namespace {

namespace fs = std::filesystem;

class AutotuneCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("linac_autotune_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file() const { return (dir_ / "sub" / "autotune.tsv").string(); }

  fs::path dir_;
};

const TuneKey kKey{"abc123", "NVIDIA H200 (132 SMs)", "delta_backward.reverse[staged|fused]",
                   "bf16 scalar delta dk128 dv128 nh64 t4096"};

TEST_F(AutotuneCacheTest, RecordedChoiceIsReadByTheNextProcess) {
  {
    AutotuneCache cache(file());
    EXPECT_FALSE(cache.find(kKey).has_value());
    ASSERT_TRUE(cache.record(kKey, {"fused", {{"staged", 1.231}, {"fused", 0.982}}}));
    EXPECT_EQ(cache.find(kKey).value_or(""), "fused");
  }
  const AutotuneCache reread(file());  // creates no file, reads the one written above
  EXPECT_EQ(reread.find(kKey).value_or(""), "fused");

  std::ifstream in(file());
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, kKey.text() + "\tfused\tstaged=1.2310,fused=0.9820");
}

TEST_F(AutotuneCacheTest, LaterLineOverridesAndOtherKeysMiss) {
  {
    AutotuneCache first(file());
    first.record(kKey, {"fused", {{"staged", 1.2}, {"fused", 1.0}}});
  }
  {
    AutotuneCache second(file());  // e.g. another rank appending its own timing
    second.record(kKey, {"staged", {{"staged", 0.9}, {"fused", 1.0}}});
  }
  const AutotuneCache cache(file());
  EXPECT_EQ(cache.find(kKey).value_or(""), "staged");
  TuneKey otherBuild = kKey;
  otherBuild.build = "def456";
  EXPECT_FALSE(cache.find(otherBuild).has_value());
  TuneKey otherGpu = kKey;
  otherGpu.gpu = "NVIDIA H100 80GB HBM3 (132 SMs)";
  EXPECT_FALSE(cache.find(otherGpu).has_value());
}

TEST_F(AutotuneCacheTest, RecordsListTheLatestChoicePerKeyInFirstSeenOrder) {
  TuneKey other = kKey;
  other.shape = "bf16 none delta dk64 dv64 nh8 t1024";
  {
    AutotuneCache cache(file());
    cache.record(kKey, {"fused", {{"staged", 1.2}, {"fused", 1.0}}});
    cache.record(other, {"staged", {{"staged", 0.5}, {"fused", 0.7}}});
    cache.record(kKey, {"staged", {{"staged", 0.9}, {"fused", 1.0}}});
  }
  const std::vector<TuneRecord> records = readTuneRecords(file());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].key.text(), kKey.text());
  EXPECT_EQ(records[0].choice, "staged");
  EXPECT_EQ(records[0].times_ms, "staged=0.9000,fused=1.0000");
  EXPECT_EQ(records[1].key.shape, other.shape);
  EXPECT_TRUE(readTuneRecords((dir_ / "missing.tsv").string()).empty());
}

TEST_F(AutotuneCacheTest, CommentsAndMalformedLinesAreSkipped) {
  fs::create_directories(fs::path(file()).parent_path());
  {
    std::ofstream out(file());
    out << "# linac autotune cache\n"
        << "not\tenough\tfields\n"
        << kKey.text() << "\t\tstaged=1.0\n"  // empty choice
        << kKey.text() << "\tlate\tearly=1.0,late=0.9\n"
        << "\n";
  }
  const AutotuneCache cache(file());
  EXPECT_EQ(cache.find(kKey).value_or(""), "late");
  EXPECT_FALSE(parseTuneLine("# comment").has_value());
  EXPECT_FALSE(parseTuneLine("a\tb\tc\td\te").has_value());
}

TEST_F(AutotuneCacheTest, FieldsLoseTabsAndUnwritableFileKeepsTheChoiceInMemory) {
  EXPECT_EQ(tuneField("a\tb\nc"), "a b c");
  fs::create_directories(dir_);
  const fs::path blocker = dir_ / "plain_file";
  std::ofstream(blocker) << "x";
  AutotuneCache cache((blocker / "autotune.tsv").string());  // its folder is a file
  EXPECT_FALSE(cache.record(kKey, {"fused", {{"fused", 1.0}}}));
  EXPECT_EQ(cache.find(kKey).value_or(""), "fused");

  AutotuneCache memoryOnly("");
  EXPECT_TRUE(memoryOnly.record(kKey, {"staged", {{"staged", 1.0}}}));
  EXPECT_EQ(memoryOnly.find(kKey).value_or(""), "staged");
}

TEST_F(AutotuneCacheTest, DefaultPathFollowsTheEnvironment) {
  ::setenv("LINAC_AUTOTUNE_CACHE", "/tmp/x/tune.tsv", 1);
  EXPECT_EQ(AutotuneCache::defaultPath(), "/tmp/x/tune.tsv");
  ::unsetenv("LINAC_AUTOTUNE_CACHE");
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(AutotuneCache::defaultPath(), "/tmp/xdg/linac/autotune.tsv");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/tmp/home", 1);
  EXPECT_EQ(AutotuneCache::defaultPath(), "/tmp/home/.cache/linac/autotune.tsv");
}

}  // namespace
}  // namespace linac::kernels
