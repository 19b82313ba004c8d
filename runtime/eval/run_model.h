// The model of a run directory, for `linac train` (fresh start and resume) and `linac eval`.
// model.json, written at the start of a run, describes what is trained; inputs/ holds copies of
// what it was built from (the linear spec, the attention spec, the preset, a schedule file, a
// SentencePiece model), each recorded in model.json with its SHA-256 and original path. Resume
// and eval build the model from these copies, so editing or moving the originals changes
// nothing, and a copy whose bytes no longer match its hash is an error.
#pragma once

#include "model/model.h"
#include "trainer/trainer.h"

#include <string>
#include <vector>

namespace linac::eval {

/// Where a run's inputs are read from.
struct RunInputs {
  std::string spec;                // the linear variant spec file
  std::string attention;           // the attention spec file
  std::string schedule;            // "3:1", "transformer", "3,7,11" or a schedule file
  std::string preset;              // a preset name (looked up in presetDir) or file
  std::string presetDir;
  std::string tokenizer = "byte";  // "byte", "none" (MQAR: ids only) or a SentencePiece model file
  std::string task = "lm";         // "lm" or "mqar"
  int64_t mqarPairs = 0;           // with task mqar
};

/// A run's model and the files that describe it.
struct RunModel {
  model::ModelConfig config;            // preset.vocab is the vocabulary trained
  int64_t presetVocab = 0;              // the preset file's vocabulary
  RunInputs inputs;                     // where it was read from
  std::vector<trainer::RunFile> files;  // model.json (the run's identity) and inputs/*
};

/// Reads the inputs and describes them; `vocab` > 0 replaces the preset's vocabulary (with the
/// tokenizer's). Throws spec::SpecError for a bad spec, std::runtime_error for an unreadable file.
RunModel describeRun(const RunInputs& inputs, int64_t vocab);

/// The inputs of the run in `dir`: its copies (each checked against its recorded SHA-256) and
/// what model.json says. Throws std::runtime_error naming the file when model.json is missing
/// or unreadable or a copy was changed.
RunInputs storedRunInputs(const std::string& dir);

/// The model of the run in `dir`, built from its copies: describeRun(storedRunInputs(dir)) with
/// the vocabulary model.json records.
RunModel loadRunModel(const std::string& dir);

}  // namespace linac::eval
