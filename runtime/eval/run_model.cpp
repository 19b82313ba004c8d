#include "eval/run_model.h"

#include "linac/Spec/SpecParser.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

namespace linac::eval {
namespace {

using Json = nlohmann::ordered_json;
constexpr int kFormat = 1;

std::optional<std::string> readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string mustRead(const std::string& path, const std::string& what) {
  std::optional<std::string> bytes = readBytes(path);
  if (!bytes)
    throw std::runtime_error("cannot read " + what + " " + path);
  return *bytes;
}

/// realpath(3), not std::filesystem::absolute: the PyPI libtorch linked into `linac` exports an
/// ABI-incompatible copy of several std::filesystem functions.
std::string absolutePath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

bool isFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// {"file", "sha256", "source"} of a copy, and the copy itself as a run file.
Json copyEntry(const std::string& copyName, const std::string& source, const std::string& bytes,
               std::vector<trainer::RunFile>& files) {
  files.push_back(trainer::RunFile{copyName, bytes, false});
  Json entry;
  entry["file"] = copyName;
  entry["sha256"] = spec::sha256Hex(bytes);
  entry["source"] = absolutePath(source);
  return entry;
}

// The path of a run's copy, checked against the hash model.json records.
std::string verifiedCopy(const std::string& dir, const Json& entry) {
  const std::string path = dir + "/" + entry.at("file").get<std::string>();
  std::optional<std::string> bytes = readBytes(path);
  if (!bytes)
    throw std::runtime_error(path + " is missing: the run directory is incomplete");
  const std::string recorded = entry.at("sha256").get<std::string>();
  const std::string actual = spec::sha256Hex(*bytes);
  if (actual != recorded)
    throw std::runtime_error(path + " was changed after the run started (sha256 " + actual.substr(0, 12) +
                             ", model.json records " + recorded.substr(0, 12) +
                             "); the run was trained with the recorded version");
  return path;
}

Json readModelJson(const std::string& dir) {
  const std::string path = dir + "/model.json";
  std::optional<std::string> text = readBytes(path);
  if (!text)
    throw std::runtime_error("cannot read " + path + ": not a run directory of `linac train`");
  Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    throw std::runtime_error(path + " is not a JSON object");
  if (!j.contains("linac_run") || j["linac_run"] != kFormat)
    throw std::runtime_error(path + " is not in the format this linac reads (linac_run " + std::to_string(kFormat) +
                             "): it was written by another version of linac");
  return j;
}

}  // namespace

RunModel describeRun(const RunInputs& in, int64_t vocab) {
  RunModel run;
  run.inputs = in;
  model::ModelConfig& mc = run.config;
  std::vector<trainer::RunFile> copies;
  Json j;
  j["linac_run"] = kFormat;

  const std::string specBytes = mustRead(in.spec, "spec");
  mc.linear = spec::parseVariant(specBytes, in.spec);
  j["variant"] = mc.linear.name;
  j["spec"] = copyEntry("inputs/spec.yaml", in.spec, specBytes, copies);
  const std::string attentionBytes = mustRead(in.attention, "attention spec");
  mc.attention = spec::parseVariant(attentionBytes, in.attention);
  j["attention"] = copyEntry("inputs/attention.yaml", in.attention, attentionBytes, copies);

  mc.schedule = spec::loadSchedule(in.schedule);
  Json schedule;
  schedule["text"] = mc.schedule.text;
  if (isFile(in.schedule))
    schedule.update(copyEntry("inputs/schedule.yaml", in.schedule, mustRead(in.schedule, "schedule"), copies));
  j["schedule"] = schedule;

  mc.preset = spec::loadPreset(in.preset, in.presetDir);
  Json preset = copyEntry("inputs/preset.yaml", mc.preset.file, mustRead(mc.preset.file, "preset"), copies);
  preset["name"] = mc.preset.name;
  preset["hidden"] = mc.preset.hidden;
  preset["layers"] = mc.preset.layers;
  preset["vocab"] = mc.preset.vocab;
  preset["attn_heads"] = mc.preset.attnHeads;
  preset["intermediate"] = mc.preset.intermediate;
  preset["max_seq_len"] = mc.preset.maxSeqLen;
  preset["tie_embeddings"] = mc.preset.tieEmbeddings;
  j["preset"] = preset;
  run.presetVocab = mc.preset.vocab;
  if (vocab > 0)
    mc.preset.vocab = vocab;

  Json tokenizer;
  if (in.tokenizer == "byte" || in.tokenizer == "none") {
    tokenizer["kind"] = in.tokenizer;
  } else {
    tokenizer["kind"] = "sentencepiece";
    tokenizer.update(copyEntry("inputs/tokenizer.model", in.tokenizer, mustRead(in.tokenizer, "tokenizer"), copies));
  }
  j["tokenizer"] = tokenizer;
  j["vocab"] = mc.preset.vocab;
  j["task"] = in.task;
  if (in.task == "mqar")
    j["mqar_pairs"] = in.mqarPairs;

  run.files.push_back(trainer::RunFile{"model.json", j.dump(2) + "\n", true});
  run.files.insert(run.files.end(), copies.begin(), copies.end());
  return run;
}

RunInputs storedRunInputs(const std::string& dir) {
  const Json j = readModelJson(dir);
  RunInputs in;
  try {
    in.spec = verifiedCopy(dir, j.at("spec"));
    in.attention = verifiedCopy(dir, j.at("attention"));
    const Json& schedule = j.at("schedule");
    in.schedule = schedule.contains("file") ? verifiedCopy(dir, schedule) : schedule.at("text").get<std::string>();
    in.preset = verifiedCopy(dir, j.at("preset"));
    const std::string kind = j.at("tokenizer").at("kind").get<std::string>();
    in.tokenizer = kind == "sentencepiece" ? verifiedCopy(dir, j.at("tokenizer")) : kind;
    in.task = j.at("task").get<std::string>();
    if (in.task == "mqar")
      in.mqarPairs = j.at("mqar_pairs").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(dir + "/model.json is incomplete: " + e.what());
  }
  return in;
}

RunModel loadRunModel(const std::string& dir) {
  const RunInputs in = storedRunInputs(dir);
  int64_t vocab = 0;
  try {
    vocab = readModelJson(dir).at("vocab").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(dir + "/model.json is incomplete: " + e.what());
  }
  return describeRun(in, vocab);
}

}  // namespace linac::eval
