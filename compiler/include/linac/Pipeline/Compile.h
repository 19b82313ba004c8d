// The compile pipeline behind `linac compile`: spec -> linac IR -> passes -> generated files.
#pragma once

#include "linac/Spec/Spec.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace linac::pipeline {

/// What `--emit=` prints.
enum class Stage { Spec, IR, IROpt, Cpp };

/// Parses "spec" | "ir" | "ir-opt" | "cpp"; throws std::invalid_argument listing the valid ones.
Stage parseStage(const std::string& text);

struct CompileOptions {
  std::string specPath;
  std::string schedule = "pure";    // model schedule shown in the IR's linac.model
  std::string preset = "340m";      // resolves expand-ratio dims; name or path
  std::string specsDir;             // where presets/ and attention.yaml are found
  /// Called with each warning the passes raise ("FILE:LINE:COL: warning: ..."), e.g. an input
  /// nothing reads; none is called when unset.
  std::function<void(const std::string&)> warn;
};

/// Generated files for one spec: relative path (under generated/) -> contents.
using FileSet = std::map<std::string, std::string>;

/// Runs the pipeline up to `stage` and returns its text form. Throws spec::SpecError for bad
/// input and std::runtime_error when a pass fails (the pass's diagnostics are in the message).
std::string dumpStage(const CompileOptions& options, Stage stage);

/// Runs the whole pipeline and returns the files to write under generated/.
FileSet generate(const CompileOptions& options);

/// Writes `files` under `outDir` all-or-nothing: into a temporary sibling folder first, then
/// renamed into place per variant folder.
void writeFiles(const FileSet& files, const std::string& outDir);

/// Regenerates every spec in `specsDir` into memory and compares with `generatedDir`. Returns
/// the list of differences ("" entries none); each is a one-line description.
std::vector<std::string> checkGenerated(const std::string& specsDir, const std::string& generatedDir);

}  // namespace linac::pipeline
