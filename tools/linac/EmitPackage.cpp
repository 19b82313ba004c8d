#include "EmitPackage.h"

#include "EmitPython.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace linac::cli {
namespace fs = std::filesystem;
namespace {

/// Kernel and API sources are copied by extension: sources and headers, not notes or build files.
bool isSource(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".h" || ext == ".cpp" || ext == ".cu" || ext == ".cuh";
}

void writeText(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
}

/// Copies the source files directly in `from` (not its subfolders) into `to`.
void copySources(const fs::path& from, const fs::path& to) {
  if (!fs::is_directory(from)) throw std::runtime_error(from.string() + " is missing from the linac checkout");
  fs::create_directories(to);
  for (const fs::directory_entry& e : fs::directory_iterator(from))
    if (e.is_regular_file() && isSource(e.path()))
      fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing);
}

/// `text` with every "@KEY@" of `values` replaced.
std::string substitute(std::string text, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values) {
    const std::string marker = "@" + key + "@";
    for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + value.size()))
      text.replace(at, marker.size(), value);
  }
  return text;
}

}  // namespace

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void writePackage(const std::vector<PackagedVariant>& variants, const PackageOptions& options) {
  const fs::path out(options.outDir);
  if (fs::exists(out) && !(fs::is_directory(out) && fs::is_empty(out)))
    throw std::runtime_error(out.string() + " exists and is not an empty folder; pass a new or empty --out");
  const fs::path runtime(options.runtimeDir);
  const fs::path capi = runtime / "capi";

  copySources(runtime / "kernels" / "common", out / "kernels" / "common");
  copySources(runtime / "kernels" / "cpu", out / "kernels" / "cpu");
  if (options.cuda) {
    copySources(runtime / "kernels" / "cuda", out / "kernels" / "cuda");
    copySources(runtime / "kernels" / "cuda" / "hopper", out / "kernels" / "cuda" / "hopper");
  }
  fs::create_directories(out / "src");
  for (const char* file : {"capi.cpp", "capi_checks.cpp", "capi_checks.h", "capi_internal.h"})
    fs::copy_file(capi / file, out / "src" / file, fs::copy_options::overwrite_existing);

  std::vector<CApiVariant> apis;
  for (const PackagedVariant& v : variants) {
    apis.push_back(v.api);
    writeText(out / "generated" / v.api.name / (v.api.name + ".h"), v.header);
    writeText(out / "generated" / v.api.name / "manifest.json", v.manifest);
    writeText(out / "src" / (v.api.name + "_capi.cpp"), emitCApiSource(v.api));
  }
  const fs::path python = out / "python" / "linac_kernels";
  fs::create_directories(python);
  for (const char* file : {"__init__.py", "_args.py", "_capi.py", "_library.py", "_recurrence.py", "_scan.py", "nn.py"})
    fs::copy_file(capi / "python" / "linac_kernels" / file, python / file);
  writeText(python / "ops.py", emitPythonOps(apis));
  writeText(python / "layers" / "__init__.py",
            "\"\"\"The compiled layers of this package's variants (<variant>.py, read by nn.py).\"\"\"\n");
  for (const PackagedVariant& v : variants) writeText(python / "layers" / (v.api.name + ".py"), v.layer);

  fs::create_directories(out / "include");
  fs::copy_file(capi / "linac_capi.h", out / "include" / "linac_capi.h");
  writeText(out / "include" / "linac_kernels.h", emitCApiHeader(apis, options.version));

  std::string names;
  for (const CApiVariant& v : apis) names += (names.empty() ? "" : " ") + v.name;
  const std::vector<std::pair<std::string, std::string>> values{
      {"VERSION", options.version}, {"VARIANTS", names}, {"CUDA_DEFAULT", options.cuda ? "ON" : "OFF"}};
  writeText(out / "CMakeLists.txt", substitute(readText(capi / "package" / "CMakeLists.txt.in"), values));
  writeText(out / "cmake" / "linac_kernelsConfig.cmake.in",
            readText(capi / "package" / "linac_kernelsConfig.cmake.in"));
}

}  // namespace linac::cli
