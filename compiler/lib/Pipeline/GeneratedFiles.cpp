// Writing generated/ all-or-nothing, and `linac compile --check`.
#include "linac/Pipeline/Compile.h"

#include "linac/Spec/Diagnostic.h"

#include <ftw.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace linac::pipeline {
namespace {

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// The first line where two texts differ, 1-based, for a useful --check message.
int firstDifferentLine(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  for (int line = 1;; ++line) {
    bool ea = !std::getline(sa, la), eb = !std::getline(sb, lb);
    if (ea || eb) return (ea && eb) ? 0 : line;
    if (la != lb) return line;
  }
}

/// Removes a directory tree. Not std::filesystem::remove_all: the PyPI libtorch that the `linac`
/// binary also links exports its own, ABI-incompatible copy of that symbol, which crashes here.
void removeTree(const fs::path& dir) {
  auto removeEntry = [](const char* path, const struct stat*, int, struct FTW*) {
    return ::remove(path);
  };
  if (::nftw(dir.c_str(), removeEntry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    throw std::runtime_error("cannot remove " + dir.string());
}

}  // namespace

void writeFiles(const FileSet& files, const std::string& outDir) {
  // Group by top-level folder (one per variant); each folder is staged complete, then swapped
  // in with a rename so a failure never leaves a half-written variant behind.
  std::map<std::string, std::vector<const FileSet::value_type*>> byFolder;
  for (const auto& entry : files) {
    fs::path rel(entry.first);
    byFolder[rel.begin()->string()].push_back(&entry);
  }
  fs::create_directories(outDir);
  std::random_device rd;
  for (const auto& [folder, entries] : byFolder) {
    fs::path target = fs::path(outDir) / folder;
    fs::path staging = fs::path(outDir) / ("." + folder + ".tmp" + std::to_string(rd()));
    fs::create_directories(staging);
    for (const auto* e : entries) {
      fs::path dst = staging / fs::path(e->first).lexically_relative(folder);
      fs::create_directories(dst.parent_path());
      std::ofstream out(dst, std::ios::binary);
      out << e->second;
      if (!out) throw std::runtime_error("cannot write " + dst.string());
    }
    fs::path old = fs::path(outDir) / ("." + folder + ".old" + std::to_string(rd()));
    if (fs::exists(target)) fs::rename(target, old);
    fs::rename(staging, target);
    if (fs::exists(old)) removeTree(old);
  }
}

std::vector<std::string> checkGenerated(const std::string& specsDir, const std::string& generatedDir) {
  std::vector<fs::path> specs;
  for (const auto& e : fs::directory_iterator(specsDir))
    if (e.is_regular_file() && e.path().extension() == ".yaml") specs.push_back(e.path());
  std::sort(specs.begin(), specs.end());
  if (specs.empty()) throw std::runtime_error("no specs (*.yaml) in " + specsDir);

  std::vector<std::string> diffs;
  std::set<std::string> produced, expectedFolders;
  for (const fs::path& spec : specs) {
    CompileOptions options;
    options.specPath = spec.string();
    options.specsDir = specsDir;
    for (const auto& [rel, text] : generate(options)) {
      produced.insert(rel);
      expectedFolders.insert(fs::path(rel).begin()->string());
      fs::path onDisk = fs::path(generatedDir) / rel;
      if (!fs::exists(onDisk)) {
        diffs.push_back(onDisk.string() + ": missing (from " + spec.string() + ")");
        continue;
      }
      if (int line = firstDifferentLine(readFile(onDisk), text))
        diffs.push_back(onDisk.string() + ":" + std::to_string(line) + ": differs from what " +
                        spec.string() + " generates");
    }
  }
  // Files in a variant's folder that the compiler no longer produces.
  for (const std::string& folder : expectedFolders) {
    fs::path dir = fs::path(generatedDir) / folder;
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && !produced.count(e.path().lexically_relative(generatedDir).string()))
        diffs.push_back(e.path().string() + ": stale (no longer generated)");
  }
  if (fs::is_directory(generatedDir))
    for (const auto& e : fs::directory_iterator(generatedDir))
      if (e.is_directory() && !expectedFolders.count(e.path().filename().string()))
        diffs.push_back(e.path().string() + ": no spec generates this folder");
  return diffs;
}

}  // namespace linac::pipeline
