#include "linac/Pipeline/Compile.h"

#include "SpecDump.h"
#include "linac/Conversion/SpecToLinac.h"
#include "linac/Dialect/Linac/Transforms/Passes.h"
#include "linac/Emit/VariantEmitter.h"
#include "linac/Spec/Diagnostic.h"
#include "linac/Spec/SpecParser.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>

namespace linac::pipeline {
namespace {

/// Everything parsed from the command line's files, kept alive while IR refers to it.
struct Inputs {
  spec::VariantSpec variant;
  spec::PresetSpec preset;
  spec::ScheduleSpec schedule;
  std::optional<spec::VariantSpec> attention;
};

Inputs loadInputs(const CompileOptions& o) {
  Inputs in;
  in.variant = spec::loadVariant(o.specPath);
  in.preset = spec::loadPreset(o.preset, o.specsDir + "/presets");
  in.schedule = spec::loadSchedule(o.schedule);
  std::string attentionPath = o.specsDir + "/attention.yaml";
  if (in.variant.kind == spec::VariantKind::Linear) {
    if (std::filesystem::exists(attentionPath)) in.attention = spec::loadVariant(attentionPath);
    // The schedule meets the preset here, in the front end, as in `linac train`: the same check
    // and message (an index past the last layer, ...), before any IR is built.
    const std::vector<bool> layers = in.schedule.expand(in.preset.layers);
    if (!in.attention && std::find(layers.begin(), layers.end(), true) != layers.end())
      throw spec::SpecError(in.schedule.loc, "schedule '" + in.schedule.text + "' has attention layers, but " +
                                                 attentionPath + " does not exist");
  }
  return in;
}

/// Collects MLIR diagnostics so a failing stage reports them in its exception, keeps the first
/// error that points into a file (a spec: the IR's locations are the spec's) and the warnings.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext& ctx)
      : handler_(&ctx, [this](mlir::Diagnostic& d) {
          llvm::raw_string_ostream os(text_);
          os << d.getLocation() << ": " << d << "\n";
          auto file = llvm::dyn_cast<mlir::FileLineColLoc>(d.getLocation());
          const bool inFile = file && file.getLine() > 0;
          const spec::SourceLoc loc = inFile ? spec::SourceLoc{file.getFilename().str(), static_cast<int>(file.getLine()),
                                                               static_cast<int>(file.getColumn())}
                                             : spec::SourceLoc{};
          if (d.getSeverity() == mlir::DiagnosticSeverity::Warning)
            warnings_.push_back(inFile ? spec::renderDiagnostic(loc, "warning", d.str()) : "warning: " + d.str());
          if (d.getSeverity() == mlir::DiagnosticSeverity::Error && inFile && !located_)
            located_ = spec::SpecError(loc, d.str());
          return mlir::success();
        }) {}
  const std::string& text() const { return text_; }
  /// The first error located in a spec, as the spec error it is.
  const std::optional<spec::SpecError>& located() const { return located_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

private:
  std::string text_;
  std::vector<std::string> warnings_;
  std::optional<spec::SpecError> located_;
  mlir::ScopedDiagnosticHandler handler_;
};

/// Records the first pass that fails.
class FailedPass : public mlir::PassInstrumentation {
public:
  explicit FailedPass(std::string& name) : name_(name) {}
  void runAfterPassFailed(mlir::Pass* pass, mlir::Operation*) override {
    if (name_.empty()) name_ = pass->getArgument().str();
  }

private:
  std::string& name_;
};

/// The passes whose failure is the spec's doing (a constant that folds to inf, ...): reported at
/// the spec's line, like the front end's errors. Any other failing pass is a compiler bug.
bool checksTheSpec(const std::string& pass) { return pass == "linac-check-constants"; }

std::string print(mlir::ModuleOp m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os);
  return s;
}

/// Builds the IR for `in` and, when `optimise`, runs the linac pipeline on it.
mlir::OwningOpRef<mlir::ModuleOp> compileModule(mlir::MLIRContext& ctx, const Inputs& in,
                                                const CompileOptions& o, bool optimise) {
  DiagnosticCollector diags(ctx);
  ModelContext model{&in.preset, in.attention ? &*in.attention : nullptr, &in.schedule};
  auto module = buildModule(ctx, in.variant, model);
  if (mlir::failed(mlir::verify(*module)))
    throw std::runtime_error("internal error: spec-to-IR produced invalid IR for " + o.specPath +
                             ":\n" + diags.text());
  if (!optimise) return module;
  mlir::PassManager pm(&ctx);
  mlir::linac::buildLinacPipeline(pm);
  std::string failed;
  pm.addInstrumentation(std::make_unique<FailedPass>(failed));
  if (mlir::failed(pm.run(*module))) {
    if (checksTheSpec(failed) && diags.located()) throw *diags.located();
    throw std::runtime_error("internal error: the linac pipeline failed on " + o.specPath + " in " + failed +
                             ":\n" + diags.text());
  }
  if (o.warn)
    for (const std::string& w : diags.warnings()) o.warn(w);
  return module;
}

}  // namespace

Stage parseStage(const std::string& text) {
  if (text == "spec") return Stage::Spec;
  if (text == "ir") return Stage::IR;
  if (text == "ir-opt") return Stage::IROpt;
  if (text == "cpp") return Stage::Cpp;
  throw std::invalid_argument("unknown --emit stage '" + text +
                              "'; valid stages are spec, ir, ir-opt, cpp");
}

std::string dumpStage(const CompileOptions& options, Stage stage) {
  Inputs in = loadInputs(options);
  if (stage == Stage::Spec) return dumpSpec(in.variant);
  mlir::MLIRContext ctx;
  auto module = compileModule(ctx, in, options, stage != Stage::IR);
  if (stage != Stage::Cpp) return print(*module);
  std::string all;
  for (const auto& [path, text] : emit::emitVariantFiles(*module))
    all += "// ===== " + path + "\n" + text;
  return all;
}

FileSet generate(const CompileOptions& options) {
  Inputs in = loadInputs(options);
  mlir::MLIRContext ctx;
  auto module = compileModule(ctx, in, options, /*optimise=*/true);
  auto files = emit::emitVariantFiles(*module);
  return FileSet(files.begin(), files.end());
}

}  // namespace linac::pipeline
