// `linac compile`: print one pipeline stage, write generated/<variant>/, or check generated/.
#include "Commands.h"

#include "linac/Pipeline/Compile.h"

#include <iostream>
#include <memory>

namespace linac::cli {
namespace {

struct CompileFlags {
  std::string spec;
  std::string emit;
  std::string out = LINAC_SOURCE_DIR "/generated";
  bool check = false;
  pipeline::CompileOptions options;
};

int runCompile(const CLI::App& app, CompileFlags& f) {
  pipeline::CompileOptions& options = f.options;
  if (f.check) {
    if (!f.spec.empty()) throw UsageError("--check takes no spec");
    auto diffs = pipeline::checkGenerated(options.specsDir, f.out);
    if (diffs.empty()) {
      std::cout << "linac compile --check: " << f.out << " is up to date\n";
      return 0;
    }
    for (const auto& d : diffs) std::cerr << d << "\n";
    std::cerr << "linac compile --check: generated/ is out of date; regenerate with:\n"
              << "  for s in specs/*.yaml; do linac compile \"$s\" --out generated; done\n";
    return 1;
  }
  if (f.spec.empty()) throw UsageError("expected a SPEC file (or --check)");
  options.specPath = f.spec;
  options.warn = [](const std::string& w) { std::cerr << w << "\n"; };
  if (given(app, "emit")) {
    pipeline::Stage stage;
    try {
      stage = pipeline::parseStage(f.emit);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    std::cout << pipeline::dumpStage(options, stage);
    return 0;
  }
  pipeline::FileSet files = pipeline::generate(options);
  pipeline::writeFiles(files, f.out);
  for (const auto& [path, _] : files) std::cout << "wrote " << f.out << "/" << path << "\n";
  return 0;
}

}  // namespace

bool compilerAvailable() { return true; }

Command addCompileCommand(CLI::App& root) {
  auto f = std::make_shared<CompileFlags>();
  f->options.specsDir = LINAC_SOURCE_DIR "/specs";
  CLI::App* app = root.add_subcommand("compile", "compile a spec: print a stage (--emit) or write generated/<variant>/");
  app->add_option("SPEC", f->spec, "the variant spec (YAML)");
  app->add_option("--emit", f->emit, "print this stage instead of writing files: spec, ir, ir-opt or cpp");
  app->add_option("--schedule", f->options.schedule, "the model schedule shown in the IR (3:1, pure, transformer, a file)")
      ->capture_default_str();
  app->add_option("--preset", f->options.preset, "the preset that resolves the sizes (specs/presets: tiny, small, 340m, 1.3b, mqar; or a file)")
      ->capture_default_str();
  app->add_option("--out", f->out, "where generated/<variant>/ is written (with --check: the folder checked)")
      ->capture_default_str();
  app->add_option("--specs-dir", f->options.specsDir, "where presets/ and attention.yaml are found")
      ->capture_default_str();
  app->add_flag("--check", f->check, "regenerate every spec and diff with generated/");
  return {app, [app, f](const std::vector<std::string>&) { return runCompile(*app, *f); }};
}

}  // namespace linac::cli
