// File helpers shared by the corpus readers and the token shards (files.h).
#include "data/files.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <dirent.h>
#include <sys/stat.h>

#include "data/data.h"

namespace linac::data::detail {
namespace {

void listCorpusFiles(const std::string& dir, std::vector<std::string>& out) {
  DIR* handle = ::opendir(dir.c_str());
  if (!handle) throw DataError(dir + ": cannot list directory: " + std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(handle))
    if (entry->d_name[0] != '.') names.emplace_back(entry->d_name);
  ::closedir(handle);
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;  // a dangling symlink
    if (S_ISDIR(st.st_mode))
      listCorpusFiles(path, out);
    else if (S_ISREG(st.st_mode) && isCorpusExtension(lowerExtension(path)))
      out.push_back(path);
  }
}

}  // namespace

std::string readWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw DataError(path + ": read error");
  return std::move(buffer).str();
}

std::string lowerExtension(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == slash + 1) return "";
  std::string ext = path.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool isCorpusExtension(const std::string& ext) { return ext == ".txt" || ext == ".jsonl" || ext == ".bin"; }

bool isRegularFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> corpusFiles(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) throw DataError(path + ": no such file or directory");
    throw DataError(path + ": " + std::strerror(errno));
  }
  std::vector<std::string> files;
  if (S_ISDIR(st.st_mode)) {
    std::string dir = path;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    listCorpusFiles(dir, files);
    if (files.empty()) throw DataError(path + ": directory holds no .txt, .jsonl or .bin files");
    std::sort(files.begin(), files.end());  // readdir order is unspecified
  } else {
    const std::string ext = lowerExtension(path);
    if (!isCorpusExtension(ext))
      throw DataError(path + ": unknown extension \"" + ext + "\" (expected .txt, .jsonl or .bin)");
    files.push_back(path);
  }
  return files;
}

}  // namespace linac::data::detail
