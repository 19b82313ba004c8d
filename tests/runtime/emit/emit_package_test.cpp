// `linac emit` end to end, as a user outside linac would take it: emit gated_deltanet's (and
// hgrn's) package to a fresh folder, configure, build and install it with CMake (once for the
// suite), then
//  - build a C program against the installed package through find_package (consumer/) and check
//    what it computes through the C API (forward, backward, T decode steps) against the float64
//    oracle on random inputs; the program also makes bad calls that the C API must refuse,
//    naming the argument;
//  - run python/ops_test.py on the installed PyTorch package (linac_kernels): fla-style
//    chunk_gated_deltanet and chunk_hgrn against float64 recurrences, autograd, torch.library,
//    refusals.
#include "test_util.h"

#include <gtest/gtest.h>

#include <ftw.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace linac::test {
namespace {

/// The spec packaged: the delta rule with a per-token decay (q, k, v, g, beta).
constexpr const char* kSpec = LINAC_SOURCE_DIR "/specs/gated_deltanet.yaml";
/// Packaged beside it for the Python test: the vector-state scan (x, g).
constexpr const char* kScanSpec = LINAC_SOURCE_DIR "/specs/hgrn.yaml";
/// Build jobs of the package's build (CI machines have 2 cores).
constexpr int kBuildJobs = 2;

/// A fresh folder under $TMPDIR (else /tmp), removed afterwards. POSIX calls, not
/// std::filesystem: libtorch.so exports its own std::filesystem::remove_all & co., which crash in
/// binaries linking torch.
class TempDir {
public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/linac_emit_test_XXXXXX";
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    ::nftw(
        path_.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Runs `command` with its output in `log`; on failure the test fails with the log's text.
bool run(const std::string& command, const std::string& log) {
  const int status = std::system((command + " > " + log + " 2>&1").c_str());
  if (status == 0) return true;
  ADD_FAILURE() << "`" << command << "` failed (status " << status << "):\n" << readText(log);
  return false;
}

void writeFloats(std::ofstream& out, const torch::Tensor& t) {
  const torch::Tensor f = t.to(torch::kFloat32).contiguous();
  out.write(reinterpret_cast<const char*>(f.data_ptr<float>()), std::streamsize(f.numel() * sizeof(float)));
}

torch::Tensor readFloats(std::ifstream& in, torch::IntArrayRef shape) {
  torch::Tensor t = torch::empty(shape, torch::kFloat32);
  in.read(reinterpret_cast<char*>(t.data_ptr<float>()), std::streamsize(t.numel() * sizeof(float)));
  EXPECT_TRUE(in.good()) << "the consumer's output is shorter than expected";
  return t.to(torch::kFloat64);
}

std::string generatorFlag() { return std::string(" -G \"") + LINAC_CMAKE_GENERATOR + "\""; }

/// gated_deltanet's and hgrn's package, emitted, built and installed once for the tests that use it.
class InstalledPackage : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    work_ = new TempDir;
    const TempDir& work = *work_;
    const std::string package = work / "package", build = work / "build";
    installed_ = run(std::string(LINAC_BIN) + " emit " + kSpec + " " + kScanSpec + " --out " + package,
                     work / "emit.log") &&
                 run("cmake -S " + package + " -B " + build + generatorFlag() +
                         " -DCMAKE_BUILD_TYPE=Release -DLINAC_KERNELS_PYTHON=ON -DLINAC_KERNELS_PYTHON_DIR=" +
                         kPythonDir,
                     work / "configure.log") &&
                 run("cmake --build " + build + " -j " + std::to_string(kBuildJobs), work / "build.log") &&
                 run("cmake --install " + build + " --prefix " + (work / "prefix"), work / "install.log");
  }
  static void TearDownTestSuite() {
    delete work_;
    work_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(installed_) << "emitting, building or installing the package failed"; }

  /// The installed PyTorch package's folder, relative to the prefix (LINAC_KERNELS_PYTHON_DIR).
  static constexpr const char* kPythonDir = "python";
  static const TempDir& work() { return *work_; }
  static std::string prefix() { return *work_ / "prefix"; }

private:
  static inline TempDir* work_ = nullptr;
  static inline bool installed_ = false;
};

TEST_F(InstalledPackage, CConsumerMatchesTheOracleThroughFindPackage) {
  const TempDir& work = InstalledPackage::work();
  const std::string package = work / "package", prefix = InstalledPackage::prefix();
  const std::string consumer = work / "consumer";

  ASSERT_TRUE(exists(package + "/include/linac_kernels.h"));
  EXPECT_FALSE(exists(package + "/kernels/cuda")) << "CUDA sources emitted without --backends cuda";
  ASSERT_TRUE(run("cmake -S " + std::string(CONSUMER_DIR) + " -B " + consumer + generatorFlag() +
                      " -DCMAKE_PREFIX_PATH=" + prefix,
                  work / "consumer-configure.log"));
  ASSERT_TRUE(run("cmake --build " + consumer, work / "consumer-build.log"));

  RecurrenceCase c;
  c.kind = {DecayClass::Scalar, UpdateRule::Delta, Readout::Inclusive};
  c.batch = 2;
  c.seq_len = 100;  // two chunks of the spec's 64, the second partial
  c.heads = 2;
  c.key_dim = 16;
  c.value_dim = 32;
  const uint32_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const RecurrenceData d = makeRecurrenceData(c, seed);
  {
    std::ofstream in(work / "inputs.bin", std::ios::binary);
    const int64_t dims[] = {c.batch, c.seq_len, c.heads, c.key_dim, c.value_dim};
    in.write(reinterpret_cast<const char*>(dims), sizeof(dims));
    for (const torch::Tensor& t : {d.q, d.k, d.v, d.g, d.beta, d.h0, d.d_o, d.d_ht}) writeFloats(in, t);
  }
  std::ostringstream scale;
  scale.precision(9);
  scale << d.scale;
  ASSERT_TRUE(run(consumer + "/consumer " + (work / "inputs.bin") + " " + (work / "outputs.bin") + " " +
                      scale.str(),
                  work / "consumer.log"));

  const int64_t B = c.batch, T = c.seq_len, H = c.heads, dk = c.key_dim, dv = c.value_dim;
  std::ifstream out(work / "outputs.bin", std::ios::binary);
  RecurrenceResult got;
  got.o = readFloats(out, {B, T, H, dv});
  got.ht = readFloats(out, {B, H, dk, dv});
  got.dq = readFloats(out, {B, T, H, dk});
  got.dk = readFloats(out, {B, T, H, dk});
  got.dv = readFloats(out, {B, T, H, dv});
  got.dg = readFloats(out, {B, T, H});
  got.dbeta = readFloats(out, {B, T, H});
  got.dh0 = readFloats(out, {B, H, dk, dv});
  const torch::Tensor stepO = readFloats(out, {B, T, H, dv});
  const torch::Tensor stepState = readFloats(out, {B, H, dk, dv});

  const RecurrenceResult ref = runOracle(c, d);
  expectClose(got, ref, kTolF32, DType::F32);
  EXPECT_LT(relRms(stepO, ref.o), kTolF32) << "decode steps' outputs";
  EXPECT_LT(relRms(stepState, ref.ht), kTolF32) << "state after the decode steps";

  const std::string log = readText(work / "consumer.log");
  for (const char* refusal : {"linac_gated_deltanet_forward: k has shape [2, 100, 2, 17], expected [B, T, H, dk]",
                              "linac_gated_deltanet_forward: v is not row-major contiguous",
                              "linac_gated_deltanet_forward: g is LINAC_F16, expected LINAC_F32",
                              "cu_seqlens ends at 99, expected T = 100",
                              "cu_seqlens decreases at index 2",
                              "linac_gated_deltanet_forward: k is NULL"})
    EXPECT_NE(log.find(refusal), std::string::npos) << "missing refusal '" << refusal << "' in:\n" << log;
}

TEST_F(InstalledPackage, PythonOpsMatchTheRecurrenceAndRefuseBadArguments) {
  const std::string python = prefix() + "/" + kPythonDir;
  for (const char* file : {"__init__.py", "_capi.py", "_library.py", "_recurrence.py", "ops.py", "liblinac_kernels.so"})
    ASSERT_TRUE(exists(python + "/linac_kernels/" + file)) << file << " missing from the installed Python package";
  EXPECT_TRUE(run("PYTHONPATH=" + python + " python3 " + PYTHON_OPS_TEST, work() / "python.log"));
}

TEST(EmitPackage, CudaBackendAddsTheCudaSourcesAndAttentionIsRefused) {
  const TempDir work;
  const std::string package = work / "package";
  ASSERT_TRUE(run(std::string(LINAC_BIN) + " emit " + kSpec + " --out " + package + " --backends cpu,cuda",
                  work / "emit.log"));
  for (const char* file : {"kernels/cuda/cuda_kernels.h", "kernels/cuda/chunk_forward.cu",
                           "kernels/cuda/hopper/forward.cu", "kernels/cpu/chunk_forward.cpp",
                           "generated/gated_deltanet/gated_deltanet.h", "src/gated_deltanet_capi.cpp",
                           "python/linac_kernels/ops.py"})
    EXPECT_TRUE(exists(package + "/" + file)) << file << " missing from a --backends cpu,cuda package";
  EXPECT_NE(readText(package + "/CMakeLists.txt").find("option(LINAC_KERNELS_CUDA \"Build the CUDA backend\" ON)"),
            std::string::npos);

  const std::string refused = work / "attention";
  const int status = std::system((std::string(LINAC_BIN) + " emit " + LINAC_SOURCE_DIR "/specs/attention.yaml --out " +
                                  refused + " > " + (work / "attention.log") + " 2>&1")
                                     .c_str());
  EXPECT_NE(status, 0);
  EXPECT_NE(readText(work / "attention.log").find("full attention, which has no linac kernels"), std::string::npos);
  EXPECT_FALSE(exists(refused)) << "a refused emit wrote " << refused;
}

}  // namespace
}  // namespace linac::test
