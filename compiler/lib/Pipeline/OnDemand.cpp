#include "linac/Pipeline/OnDemand.h"

#include "linac/Pipeline/Compile.h"
#include "linac/Spec/SpecParser.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <random>
#include <stdexcept>

namespace linac::pipeline {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

/// mkdir -p with plain POSIX calls (see GeneratedFiles.cpp on std::filesystem and libtorch).
void makeDirs(const std::string& path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error("cannot create " + prefix);
  }
}

std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// Runs `command` (stderr joined to stdout); throws with its output when it fails.
void runBuild(const std::string& command, const std::string& what, const std::string& tmp) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run the compiler: " + command);
  char buf[512];
  while (::fgets(buf, sizeof(buf), pipe)) output += buf;
  if (::pclose(pipe) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("on-demand build of " + what + " failed:\n" + command + "\n" + output);
  }
}

/// "sm_90a" -> "compute_90a"; throws on anything that is not sm_<digits>[a|f].
std::string virtualArch(const std::string& arch) {
  size_t end = 3;
  while (end < arch.size() && std::isdigit(static_cast<unsigned char>(arch[end]))) ++end;
  const bool valid = arch.rfind("sm_", 0) == 0 && end > 3 &&
                     (end == arch.size() || (end + 1 == arch.size() && (arch[end] == 'a' || arch[end] == 'f')));
  if (!valid)
    throw std::runtime_error("not a GPU architecture: '" + arch + "' (expected sm_<major><minor>, e.g. sm_90a)");
  return "compute_" + arch.substr(3);
}

}  // namespace

std::string cudaArchFor(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor) + (major == 9 && minor == 0 ? "a" : "");
}

std::string buildVariantLibrary(const spec::VariantSpec& spec, const std::string& specPath,
                                const OnDemandOptions& o, std::ostream& log) {
  const bool cuda = !o.nvcc.empty() && !o.cudaArch.empty();
  const std::string computeArch = cuda ? virtualArch(o.cudaArch) : "";
  const std::string dir = o.cacheDir + "/" + spec.name + "-" + spec.hash.substr(0, 16) + "-" +
                          spec::sha256Hex(o.build).substr(0, 8);
  const std::string library = dir + "/lib" + spec.name + (cuda ? "-" + o.cudaArch : "") + ".so";
  if (exists(library)) return library;

  log << "linac: " << spec.name << " is not in this build's generated/; compiling " << specPath
      << " on demand into " << dir << (cuda ? " (host and " + o.cudaArch + ")" : "") << "\n";
  makeDirs(dir);
  CompileOptions options;
  options.specPath = specPath;
  options.specsDir = o.specsDir;
  options.warn = [&log](const std::string& w) { log << w << "\n"; };
  writeFiles(generate(options), dir + "/src");

  const std::string tmp = library + ".tmp" + std::to_string(std::random_device{}());
  const std::string sources = dir + "/src/" + spec.name + "/" + spec.name;
  const std::string includes = " -I" + shellQuote(o.runtimeInclude) + " -I" + shellQuote(dir + "/src");
  std::string command;
  if (cuda) {
    // One nvcc call builds both sides, as linac_generated does in a CUDA build: the registration
    // through the host compiler, the device maps and fused forward for one architecture, linked
    // against the shared CUDA runtime the process already has.
    command = shellQuote(o.nvcc) + " -ccbin " + shellQuote(o.cxx) +
              " -std=c++20 -O3 -Xcompiler -fPIC -shared -cudart shared -lineinfo"
              " --expt-relaxed-constexpr -gencode=arch=" + computeArch + ",code=" +
              o.cudaArch + includes + " " + shellQuote(sources + "_register.cpp") + " " +
              shellQuote(sources + "_cuda.cu") + " -o " + shellQuote(tmp);
  } else {
    command = shellQuote(o.cxx) + " -std=c++20 -O2 -fPIC -shared" + includes + " " +
              shellQuote(sources + "_register.cpp") + " -o " + shellQuote(tmp);
  }
  runBuild(command, spec.name, tmp);
  if (::rename(tmp.c_str(), library.c_str()) != 0)
    throw std::runtime_error("cannot move " + tmp + " to " + library);
  log << "linac: built " << library << "\n";
  return library;
}

}  // namespace linac::pipeline
