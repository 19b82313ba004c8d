#include "linac/Pipeline/OnDemand.h"

#include "linac/Pipeline/Compile.h"

#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace

std::string buildVariantLibrary(const spec::VariantSpec& spec, const std::string& specPath,
                                const OnDemandOptions& o, std::ostream& log) {
  const std::string dir = o.cacheDir + "/" + spec.name + "-" + spec.hash.substr(0, 16);
  const std::string library = dir + "/lib" + spec.name + ".so";
  if (exists(library)) return library;

  log << "linac: " << spec.name << " is not in this build's generated/; compiling " << specPath
      << " on demand into " << dir << "\n";
  makeDirs(dir);
  CompileOptions options;
  options.specPath = specPath;
  options.specsDir = o.specsDir;
  options.warn = [&log](const std::string& w) { log << w << "\n"; };
  writeFiles(generate(options), dir + "/src");

  const std::string tmp = library + ".tmp" + std::to_string(std::random_device{}());
  const std::string source = dir + "/src/" + spec.name + "/" + spec.name + "_register.cpp";
  const std::string command = shellQuote(o.cxx) + " -std=c++20 -O2 -fPIC -shared -I" +
                              shellQuote(o.runtimeInclude) + " -I" + shellQuote(dir + "/src") + " " +
                              shellQuote(source) + " -o " + shellQuote(tmp) + " 2>&1";
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run the host compiler: " + command);
  char buf[512];
  while (::fgets(buf, sizeof(buf), pipe)) output += buf;
  if (::pclose(pipe) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("on-demand build of " + spec.name + " failed:\n" + command + "\n" + output);
  }
  if (::rename(tmp.c_str(), library.c_str()) != 0)
    throw std::runtime_error("cannot move " + tmp + " to " + library);
  log << "linac: built " << library << "\n";
  return library;
}

}  // namespace linac::pipeline
