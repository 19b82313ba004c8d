#include "trainer/run_dir.h"

#include "trainer/checkpoint.h"
#include "trainer/file_io.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

namespace linac::trainer {
namespace {

using Json = nlohmann::json;

// ----- the lock ---------------------------------------------------------------------------

struct HeldLock {
  int fd = -1;
  int users = 0;
};

std::mutex& lockMutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, HeldLock>& heldLocks() {
  static std::map<std::string, HeldLock> held;
  return held;
}

std::string holderPid(int fd) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string pid = n > 0 ? std::string(buf, size_t(n)) : "";
  pid = pid.substr(0, pid.find('\n'));
  return pid.find_first_not_of("0123456789") == std::string::npos ? pid : "";
}

// ----- what belongs to a run --------------------------------------------------------------

/// The trainer's own files, and eval.jsonl (`linac eval` appends its results there): an
/// --overwrite removes them with the run they describe.
const std::set<std::string>& trainerEntries() {
  static const std::set<std::string> names = {"lock", "config.json", "metrics.jsonl", "latest", "profile", "eval.jsonl"};
  return names;
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether `name` (an entry of the run directory) is something linac writes there.
bool isRunEntry(const std::string& name, const std::vector<RunFile>& files) {
  if (trainerEntries().count(name) || detail::checkpointStep(name) || endsWith(name, ".tmp"))
    return true;
  for (const auto& f : files)
    if (f.name.substr(0, f.name.find('/')) == name)
      return true;
  return false;
}

std::string valueText(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// A hash in a difference: its first 12 digits say enough.
std::string shortValue(const std::string& key, const Json& v) {
  std::string text = valueText(v);
  return key == "sha256" && text.size() > 12 ? text.substr(0, 12) : text;
}

// Differences between two JSON values at `path` (its last key `key`), ignoring fields named
// "source".
void diffJson(const std::string& path, const std::string& key, const Json& stored, const Json& now,
              std::vector<std::string>& out) {
  if (stored.is_object() && now.is_object()) {
    std::set<std::string> keys;
    for (const auto& item : stored.items())
      keys.insert(item.key());
    for (const auto& item : now.items())
      keys.insert(item.key());
    for (const auto& k : keys) {
      if (k == "source")
        continue;
      const std::string at = path.empty() ? k : path + "." + k;
      if (!stored.contains(k))
        out.push_back(at + " is absent in the run, " + shortValue(k, now[k]) + " now");
      else if (!now.contains(k))
        out.push_back(at + " is " + shortValue(k, stored[k]) + " in the run, absent now");
      else
        diffJson(at, k, stored[k], now[k], out);
    }
  } else if (stored != now) {
    out.push_back(path + " is " + shortValue(key, stored) + " in the run, " + shortValue(key, now) + " now");
  }
}

std::vector<std::string> entriesBesidesLock(const std::string& dir) {
  std::vector<std::string> out;
  if (!detail::isDirectory(dir))
    return out;
  for (auto& name : detail::listDirectory(dir))
    if (name != "lock")
      out.push_back(name);
  return out;
}

// "model.json, metrics.jsonl, 3 checkpoints": what a run directory holds, briefly.
std::string describeEntries(const std::vector<std::string>& entries) {
  std::vector<std::string> shown;
  int64_t checkpoints = 0;
  for (const auto& name : entries) {
    if (endsWith(name, ".pt") && detail::checkpointStep(name))
      ++checkpoints;
    else if (!detail::checkpointStep(name) && !endsWith(name, ".tmp"))
      shown.push_back(name);
  }
  if (checkpoints > 0)
    shown.push_back(std::to_string(checkpoints) + (checkpoints == 1 ? " checkpoint" : " checkpoints"));
  std::string out;
  for (size_t i = 0; i < shown.size(); ++i)
    out += (i ? ", " : "") + shown[i];
  return out;
}

std::string joinNames(const std::vector<std::string>& names, size_t most = 6) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < most; ++i)
    out += (i ? ", " : "") + names[i];
  if (names.size() > most)
    out += ", ... (" + std::to_string(names.size()) + " entries)";
  return out;
}

std::vector<std::string> checkFreshStart(const TrainConfig& config, const std::vector<RunFile>& files) {
  const std::string& dir = config.outDir;
  std::vector<std::string> entries = entriesBesidesLock(dir), foreign;
  if (entries.empty())
    return {};
  for (const auto& name : entries)
    if (!isRunEntry(name, files))
      foreign.push_back(name);
  if (!foreign.empty())
    throw RunRefused("the run directory " + dir + " holds files linac did not write (" + joinNames(foreign) +
                     "); choose another --out" +
                     (config.overwrite ? " (--overwrite removes only what linac wrote)" : ""));
  if (config.overwrite)
    return {"--overwrite: replacing the run in " + dir + " (" + describeEntries(entries) + ")"};
  if (config.resume) {  // a run stopped before its first checkpoint: the same run starts over
    std::vector<std::string> diffs = compareRunFiles(dir, files);
    if (!diffs.empty()) {
      std::string message = "cannot resume " + dir + ": it holds no checkpoint, and its run differs from this one:";
      for (const auto& d : diffs)
        message += "\n  " + d;
      throw RunRefused(message + "\nstart this run in another --out, or replace that one with --overwrite");
    }
    return {dir + " holds no checkpoint yet: starting its run from step 0"};
  }
  throw RunRefused("the run directory " + dir + " already holds a run (" + describeEntries(entries) +
                   "); continue it with --resume, or delete it and start over with --overwrite");
}

}  // namespace

RunLock::RunLock(const std::string& dir) {
  detail::makeDirectories(dir);
  char resolved[PATH_MAX];
  key_ = ::realpath(dir.c_str(), resolved) ? std::string(resolved) : dir;
  std::lock_guard<std::mutex> guard(lockMutex());
  auto held = heldLocks().find(key_);
  if (held != heldLocks().end()) {
    ++held->second.users;
    return;
  }
  const std::string path = key_ + "/lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw TrainError(detail::ioErrorMessage("create", path, errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string pid = holderPid(fd);
    ::close(fd);
    if (err == EWOULDBLOCK)
      throw TrainError("the run directory " + dir + " is in use by another linac process (" +
                       (pid.empty() ? std::string("pid unknown") : "pid " + pid) +
                       "); wait for it to finish, or choose another --out");
    throw TrainError("cannot lock " + path + ": " + std::strerror(err));
  }
  // The PID is for the message above; a full disk that prevents writing it changes nothing else.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);
    (void)written;
  }
  heldLocks()[key_] = HeldLock{fd, 1};
}

RunLock::~RunLock() {
  std::lock_guard<std::mutex> guard(lockMutex());
  auto held = heldLocks().find(key_);
  if (held == heldLocks().end() || --held->second.users > 0)
    return;
  ::close(held->second.fd);  // releases the flock
  heldLocks().erase(held);
}

std::vector<ConfigChange> compareConfigs(const TrainConfig& stored, const TrainConfig& resumed) {
  using Kind = ConfigChange::Kind;
  // Fields missing here (added later) need acceptChanges: the cautious default.
  static const std::map<std::string, std::optional<Kind>> kinds = {
      {"batch", Kind::Refused}, {"accumulation", Kind::Refused}, {"seq_len", Kind::Refused},
      {"steps", Kind::Safe}, {"eval_every", Kind::Safe}, {"eval_batches", Kind::Safe},
      {"eval_progress_every_s", Kind::Safe}, {"checkpoint_every", Kind::Safe}, {"keep_checkpoints", Kind::Safe},
      {"log_every", Kind::Safe}, {"device", Kind::Safe},
      // not compared: the resume keeps the run's schedule length; the rest is how this start was asked for
      {"schedule_steps", std::nullopt}, {"out_dir", std::nullopt}, {"resume", std::nullopt},
      {"overwrite", std::nullopt}, {"accept_changes", std::nullopt}};
  const Json a = Json::parse(configToJson(stored)), b = Json::parse(configToJson(resumed));
  std::vector<ConfigChange> changes;
  for (const auto& item : a.items()) {
    auto kind = kinds.find(item.key());
    if (kind != kinds.end() && !kind->second)
      continue;
    if (b.contains(item.key()) && b[item.key()] == item.value())
      continue;
    ConfigChange c{kind == kinds.end() ? Kind::NeedsAccept : *kind->second, item.key(), valueText(item.value()),
                   b.contains(item.key()) ? valueText(b[item.key()]) : "absent", ""};
    if (c.field == "steps") {
      const int64_t schedule = stored.scheduleSteps > 0 ? stored.scheduleSteps : stored.steps;
      if (resumed.steps > schedule)
        c.note = "the learning-rate schedule keeps its " + std::to_string(schedule) + " steps; steps " +
                 std::to_string(schedule + 1) + "-" + std::to_string(resumed.steps) + " run at its floor lr";
      else if (resumed.steps < schedule)
        c.note = "the run ends at step " + std::to_string(resumed.steps) + ", before its " +
                 std::to_string(schedule) + "-step learning-rate schedule does";
    }
    changes.push_back(std::move(c));
  }
  return changes;
}

std::vector<std::string> compareRunFiles(const std::string& dir, const std::vector<RunFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) {
    if (!f.identity)
      continue;
    std::optional<std::string> stored = detail::readFileIfExists(dir + "/" + f.name);
    if (!stored) {
      out.push_back(f.name + " is missing in the run directory");
      continue;
    }
    const Json s = Json::parse(*stored, nullptr, false), n = Json::parse(f.contents, nullptr, false);
    if (s.is_object() && n.is_object()) {
      std::vector<std::string> diffs;
      diffJson("", "", s, n, diffs);
      for (const auto& d : diffs)
        out.push_back(f.name + ": " + d);
    } else if (*stored != f.contents) {
      out.push_back(f.name + " differs");
    }
  }
  return out;
}

std::vector<std::string> checkRunDirectory(const TrainConfig& config, const std::vector<RunFile>& files) {
  if (config.resume && detail::isDirectory(config.outDir)) {
    if (auto latest = detail::latestCheckpoint(config.outDir)) {
      detail::CheckpointInfo info;
      try {
        info = detail::readManifest(*latest);
      } catch (const TrainError&) {
        return {};  // run() falls back to an older checkpoint (or says none is intact) and checks then
      }
      return detail::checkStart(config, files, &info);
    }
  }
  return detail::checkStart(config, files, nullptr);
}

namespace detail {

std::vector<std::string> checkStart(const TrainConfig& config, const std::vector<RunFile>& files,
                                    const CheckpointInfo* resumeFrom) {
  if (!resumeFrom)
    return checkFreshStart(config, files);
  std::vector<std::string> problems = compareRunFiles(config.outDir, files), notes;
  bool newRun = !problems.empty();  // a different model or batch shape, not a change to allow
  if (config.steps < resumeFrom->step)
    problems.push_back("steps is " + std::to_string(config.steps) + ", before the checkpoint's step " +
                       std::to_string(resumeFrom->step));
  for (const auto& c : compareConfigs(configFromJson(resumeFrom->configJson), config)) {
    const std::string what = c.field + " is " + c.stored + " in the run, " + c.resumed + " now";
    switch (c.kind) {
      case ConfigChange::Kind::Refused:
        problems.push_back(what + " (the data position counts windows of the run's batch shape)");
        newRun = true;
        break;
      case ConfigChange::Kind::NeedsAccept:
        if (config.acceptChanges) {
          notes.push_back(what + " (--accept-changes)");
        } else {
          problems.push_back(what + " (changes the training: --accept-changes allows it)");
        }
        break;
      case ConfigChange::Kind::Safe:
        notes.push_back(what + (c.note.empty() ? "" : ": " + c.note));
        break;
    }
  }
  if (problems.empty())
    return notes;
  std::string message = "cannot resume " + config.outDir + " from step " + std::to_string(resumeFrom->step) + ":";
  for (const auto& p : problems)
    message += "\n  " + p;
  if (newRun)
    message += "\na different model or batch shape is a new run: give it another --out";
  throw RunRefused(message);
}

void prepareFreshStart(const std::string& dir, const std::vector<RunFile>& files) {
  makeDirectories(dir);
  // `latest` first: a kill part-way leaves no pointer to a checkpoint about to be deleted.
  removeTree(dir + "/latest");
  for (const auto& name : entriesBesidesLock(dir))
    if (isRunEntry(name, files))
      removeTree(dir + "/" + name);
  for (const auto& f : files) {
    const std::string path = dir + "/" + f.name;
    makeDirectories(parentDirectory(path));
    writeFileAtomically(path, f.contents);
  }
}

void removeStaleTemporaries(const std::string& dir, const std::vector<RunFile>& files) {
  for (const auto& name : listDirectory(dir)) {
    const std::string path = dir + "/" + name;
    if (endsWith(name, ".tmp"))
      ::unlink(path.c_str());
    else if (isRunEntry(name, files) && isDirectory(path))
      for (const auto& inner : listDirectory(path))
        if (endsWith(inner, ".tmp"))
          ::unlink((path + "/" + inner).c_str());
  }
}

}  // namespace detail
}  // namespace linac::trainer
