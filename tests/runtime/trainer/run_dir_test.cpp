// The run directory's guarantees (trainer/run_dir.h), each on a real tiny training run: a fresh
// start never mixes with an old run, a damaged checkpoint is detected and skipped, a resume is
// checked before anything is touched, one process at a time, SIGTERM / SIGHUP stop like Ctrl-C,
// files are replaced by rename, a write that fails (a file size limit, as a full disk) removes
// its partial file and keeps the last good checkpoint, and the final checkpoint precedes a
// bounded end-of-run evaluation.
#include "test_support.h"
#include "trainer/checkpoint.h"
#include "trainer/crc32c.h"
#include "trainer/file_io.h"
#include "trainer/run_dir.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <numeric>
#include <random>
#include <sstream>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace linac::trainer;
using namespace linac::trainer::test;
namespace td = linac::trainer::detail;

namespace {

std::vector<RunFile> modelFiles(int64_t hidden, const std::string& source = "/specs/tiny.yaml") {
  const nlohmann::ordered_json model = {{"preset", {{"hidden", hidden}, {"source", source}}}};
  return {RunFile{"model.json", model.dump(2) + "\n", true},
          RunFile{"inputs/spec.yaml", "name: tiny\n", false}};
}

// Flips one byte in the middle of a file (a tensor's bytes, for a checkpoint).
void damage(const std::string& path) {
  std::string bytes = readFile(path);
  bytes[bytes.size() / 2] ^= 0x5a;
  writeFile(path, bytes);
}

template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const RunRefused& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected RunRefused";
  return "";
}

off_t fileSize(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_size;
}

struct CapturedStderr {
  CapturedStderr() { testing::internal::CaptureStderr(); }
  std::string get() { return testing::internal::GetCapturedStderr(); }
};

}  // namespace

TEST(Crc32c, KnownValuesPiecewiseAndPortable) {
  using td::crc32c;
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xe3069283u);  // the check value of CRC-32C
  EXPECT_EQ(crc32c(0, "", 0), 0u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(0, zeros.data(), zeros.size()), 0x8a9136aau);  // RFC 3720 B.4
  std::mt19937 rng(3);
  std::string bytes(10007, '\0');
  for (auto& b : bytes)
    b = static_cast<char>(rng());
  const uint32_t whole = crc32c(0, bytes.data(), bytes.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(4096), size_t(10006)})
    EXPECT_EQ(crc32c(crc32c(0, bytes.data(), cut), bytes.data() + cut, bytes.size() - cut), whole) << cut;
  for (size_t n : {size_t(0), size_t(3), size_t(8), size_t(13), bytes.size()})
    EXPECT_EQ(td::crc32cPortable(0, bytes.data(), n), crc32c(0, bytes.data(), n)) << n;
}

// The bug: a plain re-run into an existing run directory kept the old run's higher checkpoints,
// deleted the new ones and truncated its metrics. Now it is refused, touching nothing.
TEST(RunDirectory, FreshStartRefusesAnExistingRunUntilOverwrite) {
  TrainConfig c = tinyConfig(freshDir("fresh"));
  c.steps = 6;
  c.checkpointEvery = 2;
  train(c, 11, -1, 0, modelFiles(16));
  const auto before = snapshot(c.outDir);
  c.steps = 3;
  c.checkpointEvery = 0;
  std::string message = refusal([&] { train(c, 11, -1, 0, modelFiles(16)); });
  EXPECT_NE(message.find(c.outDir), std::string::npos) << message;
  EXPECT_NE(message.find("--resume"), std::string::npos) << message;
  EXPECT_NE(message.find("--overwrite"), std::string::npos) << message;
  EXPECT_EQ(snapshot(c.outDir), before);
  EXPECT_THROW(checkRunDirectory(c, modelFiles(16)), RunRefused);  // the early check says the same

  c.overwrite = true;
  RunLog again = train(c, 11, -1, 0, modelFiles(16));
  EXPECT_EQ(again.result.step, 3);
  std::vector<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(c.outDir))
    names.push_back(fs::relative(e.path(), c.outDir).string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-3.json", "ckpt-3.pt", "config.json", "inputs", "inputs/spec.yaml",
                                              "latest", "lock", "metrics.jsonl", "model.json"}));
  EXPECT_EQ(readLines(c.outDir + "/metrics.jsonl").size(), 4u);  // steps 1-3 and the final evaluation
}

TEST(RunDirectory, OverwriteRemovesOnlyWhatLinacWrote) {
  TrainConfig c = tinyConfig(freshDir("foreign"));
  c.steps = 2;
  fs::create_directories(c.outDir);
  writeFile(c.outDir + "/notes.txt", "mine");
  c.overwrite = true;
  std::string message = refusal([&] { train(c, 11); });
  EXPECT_NE(message.find("notes.txt"), std::string::npos) << message;
  EXPECT_EQ(readFile(c.outDir + "/notes.txt"), "mine");
}

// The bug: flipped bytes inside a tensor loaded silently. The fallback resumes exactly as the
// uninterrupted run went on from that step.
TEST(RunDirectory, DamagedLatestCheckpointFallsBackToThePreviousOne) {
  TrainConfig c = tinyConfig(freshDir("damaged"));
  c.checkpointEvery = 5;
  RunLog full = train(c, 11);
  damage(c.outDir + "/ckpt-20.pt");
  EXPECT_THROW(td::verifyCheckpoint(c.outDir + "/ckpt-20.pt"), TrainError);
  torch::manual_seed(1);
  TinyLM model;
  try {
    loadModelWeights(c.outDir + "/ckpt-20.pt", *model, torch::kCPU);
    ADD_FAILURE() << "a damaged checkpoint must not load";
  } catch (const TrainError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
  }

  c.resume = true;
  CapturedStderr err;
  RunLog resumed = train(c, 999);
  const std::string notices = err.get();
  EXPECT_NE(notices.find("ckpt-20.pt is damaged: checksum mismatch"), std::string::npos) << notices;
  EXPECT_NE(notices.find("falling back to " + c.outDir + "/ckpt-15.pt"), std::string::npos) << notices;
  EXPECT_EQ(resumed.result.resumedFrom, 15);
  ASSERT_EQ(resumed.losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(resumed.losses[i], full.losses[15 + i]) << "step " << 16 + i;
  EXPECT_NO_THROW(td::verifyCheckpoint(c.outDir + "/ckpt-20.pt"));  // written again
}

TEST(RunDirectory, NoIntactCheckpointIsAnErrorNamingEach) {
  TrainConfig c = tinyConfig(freshDir("allbad"));
  c.steps = 10;
  c.checkpointEvery = 5;
  train(c, 11);
  damage(c.outDir + "/ckpt-10.pt");
  ASSERT_EQ(::truncate((c.outDir + "/ckpt-5.pt").c_str(), fileSize(c.outDir + "/ckpt-5.pt") / 2), 0);
  c.resume = true;
  c.steps = 12;
  CapturedStderr err;
  try {
    train(c, 11);
    ADD_FAILURE() << "no intact checkpoint: the resume must fail";
  } catch (const RunRefused&) {
    ADD_FAILURE() << "a damaged run is an error, not a refusal";
  } catch (const TrainError& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("no intact checkpoint in " + c.outDir + ":", 0), 0u) << m;
    EXPECT_NE(m.find("ckpt-10.pt is damaged: checksum mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find("ckpt-5.pt is damaged: it is "), std::string::npos) << m;
    EXPECT_NE(m.find("(truncated or overwritten)"), std::string::npos) << m;
  }
  err.get();
  EXPECT_EQ(readLines(c.outDir + "/latest"), (std::vector<std::string>{"ckpt-10.pt"}));  // untouched
}

TEST(RunDirectory, ACheckpointWithoutItsManifestIsSkipped) {
  TrainConfig c = tinyConfig(freshDir("nomanifest"));
  c.steps = 10;
  c.checkpointEvery = 5;
  train(c, 11);
  fs::remove(c.outDir + "/ckpt-10.json");
  c.resume = true;
  c.steps = 11;
  CapturedStderr err;
  RunLog resumed = train(c, 11);
  const std::string notices = err.get();
  EXPECT_NE(notices.find("ckpt-10.pt has no manifest ckpt-10.json"), std::string::npos) << notices;
  EXPECT_EQ(resumed.result.resumedFrom, 5);
}

// The bug: a changed preset trained the old architecture, and a refused resume had already
// rewritten model.json. Now every difference is listed and nothing is touched.
TEST(RunDirectory, ResumeRefusesAnotherModelBeforeTouchingAnything) {
  TrainConfig c = tinyConfig(freshDir("identity"));
  train(c, 11, /*stopAfter=*/10, 0, modelFiles(16));
  const auto before = snapshot(c.outDir);
  c.resume = true;
  c.batch = 8;
  std::string message = refusal([&] { train(c, 11, -1, 0, modelFiles(32)); });
  EXPECT_NE(message.find("cannot resume " + c.outDir + " from step 10:"), std::string::npos) << message;
  EXPECT_NE(message.find("model.json: preset.hidden is 16 in the run, 32 now"), std::string::npos) << message;
  EXPECT_NE(message.find("batch is 4 in the run, 8 now"), std::string::npos) << message;
  EXPECT_EQ(snapshot(c.outDir), before);
  EXPECT_THROW(checkRunDirectory(c, modelFiles(32)), RunRefused);

  c.batch = 4;  // where an input was read from may change
  RunLog resumed = train(c, 11, -1, 0, modelFiles(16, "/moved/tiny.yaml"));
  EXPECT_EQ(resumed.result.resumedFrom, 10);
  EXPECT_EQ(resumed.result.step, 20);
}

TEST(RunDirectory, ResumeChangingTheOptimizationNeedsAcceptChanges) {
  TrainConfig c = tinyConfig(freshDir("accept"));
  train(c, 11, /*stopAfter=*/10);
  c.resume = true;
  c.lr = 5e-3;
  c.seed = 8;
  const auto before = snapshot(c.outDir);
  std::string message = refusal([&] { train(c, 11); });
  EXPECT_NE(message.find("lr is 0.01 in the run, 0.005 now (changes the training: --accept-changes allows it)"),
            std::string::npos) << message;
  EXPECT_NE(message.find("seed is 7 in the run, 8 now"), std::string::npos) << message;
  EXPECT_EQ(snapshot(c.outDir), before);

  c.acceptChanges = true;
  CapturedStderr err;
  RunLog resumed = train(c, 11);
  const std::string notes = err.get();
  EXPECT_NE(notes.find("note: lr is 0.01 in the run, 0.005 now (--accept-changes)"), std::string::npos) << notes;
  EXPECT_EQ(resumed.result.step, 20);
}

// The bug: a changed --steps silently re-planned the cosine mid-run. More steps are accepted
// with a note; the schedule keeps its length and the extra steps run at the floor.
TEST(RunDirectory, MoreStepsKeepTheLearningRateSchedule) {
  TrainConfig c = tinyConfig(freshDir("longer"));
  c.evalEvery = 5;  // a safe change below too
  RunLog first = train(c, 11);
  c.resume = true;
  c.steps = 24;
  c.evalEvery = 0;
  CapturedStderr err;
  RunLog more = train(c, 11);
  const std::string notes = err.get();
  EXPECT_NE(notes.find("note: steps is 20 in the run, 24 now: the learning-rate schedule keeps its 20 steps; "
                       "steps 21-24 run at its floor lr"),
            std::string::npos) << notes;
  EXPECT_NE(notes.find("note: eval_every is 5 in the run, 0 now"), std::string::npos) << notes;
  ASSERT_EQ(more.lrs.size(), 4u);
  for (double lr : more.lrs)
    EXPECT_DOUBLE_EQ(lr, c.lr * c.minLrRatio);
  EXPECT_DOUBLE_EQ(first.lrs.back(), c.lr * c.minLrRatio);

  c.steps = 12;  // behind the checkpoint
  EXPECT_NE(refusal([&] { train(c, 11); }).find("steps is 12, before the checkpoint's step 24"), std::string::npos);
}

TEST(RunDirectory, LockAdmitsOneProcessAndNamesTheHolder) {
  const std::string dir = freshDir("lock");
  {
    RunLock held(dir);
    RunLock again(dir);  // the same process shares it (`linac train` locks early, run() again)
    int fd = ::open((dir + "/lock").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0) << "another open file must not get the lock";
    EXPECT_EQ(readFile(dir + "/lock"), std::to_string(::getpid()) + "\n");
    ::close(fd);
  }
  // Another process holding it (an flock on another open file description, PID 4242 written):
  int fd = ::open((dir + "/lock").c_str(), O_RDWR);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0) << "released when the last RunLock went";
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ASSERT_EQ(::pwrite(fd, "4242\n", 5, 0), 5);
  TrainConfig c = tinyConfig(dir);
  try {
    train(c, 11);
    ADD_FAILURE() << "a locked run directory must be refused";
  } catch (const TrainError& e) {
    EXPECT_EQ(std::string(e.what()), "the run directory " + dir +
                                         " is in use by another linac process (pid 4242); wait for it to finish, "
                                         "or choose another --out");
  }
  ::close(fd);
  EXPECT_FALSE(fs::exists(dir + "/metrics.jsonl"));
}

// The bug: SIGTERM and SIGHUP (schedulers, containers) killed the run without a checkpoint.
TEST(RunDirectory, SigtermAndSighupCheckpointAndStopWithoutEvaluating) {
  for (int sig : {SIGTERM, SIGHUP}) {
    TrainConfig c = tinyConfig(freshDir("signal" + std::to_string(sig)));
    c.evalEvery = 4;  // an evaluation is due at the stop step: a stopping run skips it
    RunLog run = train(c, 11, /*stopAfter=*/4, sig);
    EXPECT_TRUE(run.result.interrupted);
    EXPECT_EQ(run.result.stopSignal, sig);
    EXPECT_EQ(run.result.step, 4);
    EXPECT_FALSE(run.result.lastEval.has_value());
    EXPECT_EQ(readLines(c.outDir + "/latest"), (std::vector<std::string>{"ckpt-4.pt"}));
    EXPECT_NO_THROW(td::verifyCheckpoint(c.outDir + "/ckpt-4.pt"));
    EXPECT_NE(run.progress.find(std::string("stopped at step 4 by ") + (sig == SIGTERM ? "SIGTERM" : "SIGHUP")),
              std::string::npos) << run.progress;
    struct sigaction current {};
    ::sigaction(sig, nullptr, &current);
    EXPECT_EQ(current.sa_handler, SIG_DFL) << "the handler is gone after run()";
  }
}

TEST(RunDirectory, AtomicFileKeepsTheOldContentsUntilCommit) {
  const std::string dir = freshDir("atomicfile");
  fs::create_directories(dir);
  const std::string path = dir + "/config.json";
  writeFile(path, "old");
  {
    td::AtomicFile f(path);
    f.write("new");
    EXPECT_EQ(readFile(path), "old");
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }  // not committed: an exception on the way
  EXPECT_EQ(readFile(path), "old");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  td::writeFileAtomically(path, "new");
  EXPECT_EQ(readFile(path), "new");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// The bug: metrics.jsonl was truncated in place on resume (0 bytes after a kill at that moment).
// Now it is replaced by rename (a new inode); a line a kill cut short is dropped.
TEST(RunDirectory, ResumeReplacesMetricsAndConfigByRename) {
  TrainConfig c = tinyConfig(freshDir("rename"));
  train(c, 11, /*stopAfter=*/10);
  std::string metrics = readFile(c.outDir + "/metrics.jsonl");
  writeFile(c.outDir + "/metrics.jsonl", metrics + "{\"step\":11,\"loss\":2.1}\n{\"step\":12,\"lo");
  auto inode = [](const std::string& p) {
    struct stat st {};
    ::stat(p.c_str(), &st);
    return st.st_ino;
  };
  const auto metricsInode = inode(c.outDir + "/metrics.jsonl"), configInode = inode(c.outDir + "/config.json");
  c.resume = true;
  train(c, 11);
  EXPECT_NE(inode(c.outDir + "/metrics.jsonl"), metricsInode);
  EXPECT_NE(inode(c.outDir + "/config.json"), configInode);
  std::vector<int64_t> steps;
  for (const auto& line : readLines(c.outDir + "/metrics.jsonl")) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << line;
    if (j.contains("loss"))
      steps.push_back(j["step"].get<int64_t>());
  }
  std::vector<int64_t> expected(20);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(steps, expected);
}

// A failed checkpoint write (here a file size limit, EFBIG; a full disk, ENOSPC, takes the same
// path and is tested on a tmpfs in tests/cli) names the file, removes the partial file and
// leaves `latest` on the last good checkpoint.
TEST(RunDirectory, AFailedCheckpointWriteKeepsTheLastGoodOne) {
  TrainConfig c = tinyConfig(freshDir("efbig"));
  c.checkpointEvery = 5;
  struct rlimit saved {};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, &previous);  // write() then fails with EFBIG instead
  torch::manual_seed(11);
  TinyLM model;
  VectorStream stream(learnableTokens(4096, 1), kSeqLen, 3);
  TrainHooks hooks;
  hooks.onStep = [&](const StepStats& s) {
    if (s.step == 7) {
      struct rlimit limit = saved;
      limit.rlim_cur = static_cast<rlim_t>(fileSize(c.outDir + "/ckpt-5.pt") / 2);
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
  };
  Trainer trainer(c, model.ptr(), [&](const torch::Tensor& t) { return model->forward(t); }, stream, {}, hooks);
  trainer.setProgressStream(nullptr);
  std::string message;
  try {
    trainer.run();
  } catch (const TrainError& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &previous, nullptr);
  EXPECT_EQ(message, "file size limit exceeded writing " + c.outDir + "/ckpt-10.pt.tmp (the partial file was " +
                         "removed); the last good checkpoint is " + c.outDir + "/ckpt-5.pt");
  EXPECT_FALSE(fs::exists(c.outDir + "/ckpt-10.pt.tmp"));
  EXPECT_EQ(readLines(c.outDir + "/latest"), (std::vector<std::string>{"ckpt-5.pt"}));
  EXPECT_NO_THROW(td::verifyCheckpoint(c.outDir + "/ckpt-5.pt"));
}

// The bug: the end-of-run evaluation ran before the final checkpoint, over every held-out window,
// silently. Now the checkpoint comes first, the evaluation is bounded and reports progress, and a
// signal during it stops it.
TEST(RunDirectory, FinalCheckpointPrecedesABoundedEvaluation) {
  TrainConfig c = tinyConfig(freshDir("finaleval"));
  c.steps = 4;
  c.evalBatches = 1;
  c.evalProgressEveryS = 0;
  torch::manual_seed(11);
  TinyLM model;
  VectorStream stream(learnableTokens(4096, 1), kSeqLen, 3);
  bool checkpointFirst = false;
  TrainHooks hooks;
  hooks.onEval = [&](const EvalStats& e) {
    checkpointFirst = e.step == 4 && readLines(c.outDir + "/latest") == std::vector<std::string>{"ckpt-4.pt"};
  };
  Trainer trainer(c, model.ptr(), [&](const torch::Tensor& t) { return model->forward(t); }, stream,
                  heldOutWindows(), hooks);
  std::ostringstream progress;
  trainer.setProgressStream(&progress);
  TrainResult r = trainer.run();
  EXPECT_TRUE(checkpointFirst);
  ASSERT_TRUE(r.lastEval.has_value());
  EXPECT_EQ(r.lastEval->targets, c.batch * kSeqLen);  // 1 batch of the 2
  EXPECT_FALSE(r.interrupted);

  c = tinyConfig(freshDir("finaleval2"));
  c.steps = 4;
  c.evalProgressEveryS = 0;
  bool raised = false;
  Trainer second(c, model.ptr(), [&](const torch::Tensor& t) {
    if (!model->is_training() && !raised) {  // during the evaluation's first batch
      raised = true;
      std::raise(SIGTERM);
    }
    return model->forward(t);
  }, stream, heldOutWindows(), {});
  std::ostringstream progress2;
  second.setProgressStream(&progress2);
  TrainResult stopped = second.run();
  EXPECT_NE(progress2.str().find("eval step 4: batch 1/2"), std::string::npos) << progress2.str();
  EXPECT_TRUE(stopped.interrupted);
  EXPECT_EQ(stopped.stopSignal, SIGTERM);
  EXPECT_FALSE(stopped.lastEval.has_value());
  EXPECT_EQ(readLines(c.outDir + "/latest"), (std::vector<std::string>{"ckpt-4.pt"}));
}
