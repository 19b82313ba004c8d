// Helpers of the linac::data tests: a temporary directory, exception checks, little-endian bytes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

namespace linac::data::test_support {

// A fresh directory per test, removed afterwards. POSIX calls, not std::filesystem: libtorch.so
// exports its own std::filesystem::remove_all & co., which crash in binaries linking torch.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/linac_data_test_XXXXXX";
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    ::nftw(
        path_.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    mkdirs(name.substr(0, name.rfind('/') == std::string::npos ? 0 : name.rfind('/')));
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string mkdirs(const std::string& relative) const {  // mkdir -p below the temp dir
    std::string p = path_;
    size_t start = 0;
    while (start < relative.size()) {
      size_t end = relative.find('/', start);
      if (end == std::string::npos) end = relative.size();
      p += "/" + relative.substr(start, end - start);
      ::mkdir(p.c_str(), 0755);
      start = end + 1;
    }
    return p;
  }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

// Expects `fn` to throw E whose message contains every one of `parts`.
template <typename E>
void expectThrows(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "\"" << part << "\" not in: " << e.what();
  }
}

inline std::string le(std::initializer_list<uint32_t> values, int width) {
  std::string out;
  for (uint32_t v : values)
    for (int b = 0; b < width; ++b) out += static_cast<char>((v >> (8 * b)) & 0xff);
  return out;
}

}  // namespace linac::data::test_support
