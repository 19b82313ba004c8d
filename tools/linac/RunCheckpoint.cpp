#include "RunCheckpoint.h"

#include "trainer/trainer.h"

#include <sys/stat.h>

namespace linac::cli {
namespace {

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string RunCheckpoint::fileName() const {
  const size_t slash = ckpt.find_last_of('/');
  return slash == std::string::npos ? ckpt : ckpt.substr(slash + 1);
}

RunCheckpoint resolveCheckpoint(const std::string& path, std::ostream& notices) {
  RunCheckpoint r;
  if (isDirectory(path)) {
    r.dir = path;
    r.ckpt = trainer::latestIntactCheckpoint(path, &notices);
    return r;
  }
  r.ckpt = path;
  const size_t slash = path.find_last_of('/');
  r.dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (r.dir.empty()) r.dir = "/";
  return r;
}

}  // namespace linac::cli
