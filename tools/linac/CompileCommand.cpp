// `linac compile`: print one pipeline stage, write generated/<variant>/, or check generated/.
#include "Args.h"
#include "Commands.h"

#include "linac/Pipeline/Compile.h"

#include <iostream>

namespace linac::cli {

bool compilerAvailable() { return true; }

int runCompile(int argc, char** argv) {
  Args args = parseArgs(argc, argv, 2, {"emit", "schedule", "preset", "out", "target", "specs-dir"},
                        {"check"});
  pipeline::CompileOptions options;
  options.specsDir = args.get("specs-dir", LINAC_SOURCE_DIR "/specs");
  options.schedule = args.get("schedule", options.schedule);
  options.preset = args.get("preset", options.preset);
  options.target = args.get("target", options.target);
  if (options.target != "cuda" && options.target != "cpu")
    throw UsageError("--target must be 'cuda' or 'cpu', got '" + options.target + "'");

  if (args.has("check")) {
    if (!args.positional.empty()) throw UsageError("--check takes no spec");
    std::string generatedDir = args.get("out", LINAC_SOURCE_DIR "/generated");
    auto diffs = pipeline::checkGenerated(options.specsDir, generatedDir);
    if (diffs.empty()) {
      std::cout << "linac compile --check: " << generatedDir << " is up to date\n";
      return 0;
    }
    for (const auto& d : diffs) std::cerr << d << "\n";
    std::cerr << "linac compile --check: generated/ is out of date; regenerate with:\n"
              << "  for s in specs/*.yaml; do linac compile \"$s\" --out generated; done\n";
    return 1;
  }

  if (args.positional.size() != 1) throw UsageError("expected exactly one SPEC file");
  options.specPath = args.positional[0];
  if (args.has("emit")) {
    pipeline::Stage stage;
    try {
      stage = pipeline::parseStage(args.get("emit", ""));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    std::cout << pipeline::dumpStage(options, stage);
    return 0;
  }
  std::string out = args.get("out", LINAC_SOURCE_DIR "/generated");
  pipeline::FileSet files = pipeline::generate(options);
  pipeline::writeFiles(files, out);
  for (const auto& [path, _] : files) std::cout << "wrote " << out << "/" << path << "\n";
  return 0;
}

}  // namespace linac::cli
