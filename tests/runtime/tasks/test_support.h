// Shared by the task tests: a temporary directory and the tokenizers and haystack they use.
#pragma once

#include "data/data.h"
#include "tasks/ruler.h"

#include <ftw.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace linac::tasks::testing {

// POSIX calls, not std::filesystem: libtorch.so exports its own std::filesystem functions.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/linac_tasks_test_XXXXXX";
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    ::nftw(path_.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); }, 16,
           FTW_DEPTH | FTW_PHYS);
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

/// The default corpus as the essay haystack, as `linac eval` uses it for an embedded-corpus run.
inline RulerSetup byteSetup(const data::Tokenizer& tokenizer) {
  std::string text;
  for (const std::string& doc : data::defaultCorpusDocuments()) text += doc + "\n";
  return RulerSetup{&tokenizer, splitWords(text)};
}

}  // namespace linac::tasks::testing
