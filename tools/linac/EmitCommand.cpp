// `linac emit SPEC... --out DIR [--backends cpu,cuda]`: a self-contained source package of the
// specs' kernels with a C API, a CMake package and a PyTorch package (EmitPackage.h). The generated code comes from
// generated/<variant>/ when it was generated from this version of the spec, else (in a build
// with the compiler) from compiling the spec now.
#include "Commands.h"
#include "EmitPackage.h"

#include "linac/Spec/SpecParser.h"

#ifdef LINAC_HAVE_COMPILER
#include "linac/Pipeline/Compile.h"
#endif

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

namespace linac::cli {
namespace {

/// The version of the emitted package's C API and CMake package (SameMajorVersion compatible).
constexpr const char* kPackageVersion = "0.1.0";

struct EmitFlags {
  std::vector<std::string> specs;
  std::string out;
  std::string backends = "cpu";
};

std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Parses --backends: cpu is always built; cuda adds the CUDA sources.
bool wantsCuda(const std::string& backends) {
  bool cuda = false;
  for (const std::string& item : splitList(backends, ',', "--backends")) {
    if (item == "cuda") cuda = true;
    else if (item != "cpu")
      throw UsageError("--backends takes a comma-separated list of cpu and cuda, got '" + item + "'");
  }
  return cuda;
}

/// The variant's manifest, header and Python layer, from generated/ or compiled now.
PackagedVariant variantSources(const std::string& specPath) {
  const spec::VariantSpec spec = spec::loadVariant(specPath);
  if (spec.kind != spec::VariantKind::Linear)
    throw UsageError(specPath + ": '" + spec.name + "' is full attention, which has no linac "
                     "kernels to emit (it runs through SDPA)");
  const std::filesystem::path dir = std::filesystem::path(LINAC_SOURCE_DIR) / "generated" / spec.name;
  const std::string manifestPath = (dir / "manifest.json").string();
  std::string manifest = readFile(manifestPath);
  std::string header = readFile(dir / (spec.name + ".h"));
  std::string layer = readFile(dir / (spec.name + "_layer.py"));
  bool current = !manifest.empty() && !header.empty() && !layer.empty() &&
                 parseManifest(manifest, manifestPath).specHash == spec.hash;
  if (!current) {
#ifdef LINAC_HAVE_COMPILER
    std::cerr << "linac emit: compiling " << specPath << " (not in generated/ at this version)\n";
    pipeline::CompileOptions options;
    options.specPath = specPath;
    options.specsDir = LINAC_SOURCE_DIR "/specs";
    options.warn = [](const std::string& w) { std::cerr << w << "\n"; };
    const pipeline::FileSet files = pipeline::generate(options);
    manifest = files.at(spec.name + "/manifest.json");
    header = files.at(spec.name + "/" + spec.name + ".h");
    layer = files.at(spec.name + "/" + spec.name + "_layer.py");
#else
    throw UsageError("generated/" + spec.name + " is missing or was generated from another version of " +
                     specPath + ", and this build has no compiler; run `linac compile " + specPath +
                     " --out generated` on a machine with MLIR");
#endif
  }
  return {parseManifest(manifest, specPath + " (manifest)"), header, manifest, layer};
}

int runEmit(const EmitFlags& f) {
  PackageOptions options;
  options.outDir = f.out;
  options.runtimeDir = LINAC_SOURCE_DIR "/runtime";
  options.cuda = wantsCuda(f.backends);
  options.version = kPackageVersion;

  std::vector<PackagedVariant> variants;
  for (const std::string& specPath : f.specs) {
    PackagedVariant v = variantSources(specPath);
    for (const PackagedVariant& earlier : variants)
      if (earlier.api.name == v.api.name)
        throw UsageError(specPath + ": a second spec named '" + v.api.name + "'; each variant once");
    variants.push_back(std::move(v));
  }
  writePackage(variants, options);
  std::cout << "wrote " << options.outDir << ": " << variants.size() << " variant(s), backends cpu"
            << (options.cuda ? ",cuda" : "") << "; build with `cmake -S " << options.outDir
            << " -B build && cmake --build build && cmake --install build --prefix PREFIX`\n";
  return 0;
}

}  // namespace

Command addEmitCommand(CLI::App& root) {
  auto f = std::make_shared<EmitFlags>();
  CLI::App* app = root.add_subcommand(
      "emit", "a source package of the specs' kernels: a shared library with a C API (include/linac_kernels.h), "
              "a CMake package (find_package(linac_kernels) -> linac::kernels) and, where python3 imports "
              "torch, a PyTorch package (linac_kernels: fla-style chunk_<variant> functions)");
  app->add_option("SPEC", f->specs, "the linear variant specs (YAML) whose kernels are packaged")->required();
  app->add_option("--out", f->out, "the package folder to write")->required();
  app->add_option("--backends", f->backends, "comma-separated: cpu (always built) and cuda (adds the CUDA sources)")
      ->capture_default_str();
  return {app, [f](const std::vector<std::string>&) { return runEmit(*f); }};
}

}  // namespace linac::cli
