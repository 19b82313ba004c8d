// linac-package: writes the source package that `linac emit` writes (EmitPackage.h), for variants
// already compiled into generated/, without the compiler or the runtime. The Python wheel
// (python/CMakeLists.txt) runs it at build time over every folder of generated/, so that
// `pip install .` needs neither MLIR nor LibTorch.
//
//   linac-package --out DIR --runtime RUNTIME_DIR --version X.Y.Z [--cuda] GENERATED_VARIANT_DIR...
//
// Each GENERATED_VARIANT_DIR is generated/<variant>/ with its manifest.json, <variant>.h and
// <variant>_layer.py.
// Full-attention folders (no kernels) are skipped. Exit status 0, or 1 with the reason on stderr.
#include "../linac/EmitPackage.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {
namespace fs = std::filesystem;

struct Arguments {
  std::string out, runtime, version;
  bool cuda = false;
  std::vector<fs::path> variantDirs;
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--out") a.out = value();
    else if (arg == "--runtime") a.runtime = value();
    else if (arg == "--version") a.version = value();
    else if (arg == "--cuda") a.cuda = true;
    else if (arg.rfind("--", 0) == 0) throw std::runtime_error("unknown option " + arg);
    else a.variantDirs.emplace_back(arg);
  }
  if (a.out.empty() || a.runtime.empty() || a.version.empty() || a.variantDirs.empty())
    throw std::runtime_error(
        "usage: linac-package --out DIR --runtime RUNTIME_DIR --version X.Y.Z [--cuda] GENERATED_VARIANT_DIR...");
  return a;
}

/// The variant compiled into `dir`, or nothing for full attention (no kernels to package).
std::optional<linac::cli::PackagedVariant> loadVariant(const fs::path& dir) {
  const std::string name = dir.filename().string();
  const fs::path manifestPath = dir / "manifest.json";
  const std::string manifest = linac::cli::readText(manifestPath.string());
  const nlohmann::json j = nlohmann::json::parse(manifest, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.value("kind", "") == "attention") return std::nullopt;
  return linac::cli::PackagedVariant{linac::cli::parseManifest(manifest, manifestPath.string()),
                                     linac::cli::readText((dir / (name + ".h")).string()), manifest,
                                     linac::cli::readText((dir / (name + "_layer.py")).string())};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Arguments a = parse(argc, argv);
    std::vector<linac::cli::PackagedVariant> variants;
    for (const fs::path& dir : a.variantDirs)
      if (auto v = loadVariant(dir)) variants.push_back(std::move(*v));
    if (variants.empty()) throw std::runtime_error("no linear variant among the folders given");
    fs::remove_all(a.out);
    linac::cli::writePackage(variants, {.outDir = a.out, .runtimeDir = a.runtime, .cuda = a.cuda, .version = a.version});
    std::cout << "linac-package: wrote " << a.out << " (" << variants.size() << " variants)\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "linac-package: " << e.what() << "\n";
    return 1;
  }
}
