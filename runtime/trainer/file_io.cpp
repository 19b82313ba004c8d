#include "trainer/file_io.h"

#include "trainer/trainer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace linac::trainer::detail {
namespace {

// Writes all of `size` bytes, retrying short writes and EINTR; 0 or the errno of the failure.
int writeAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

std::string ioErrorMessage(const std::string& doing, const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT)
    return "no space left on device writing " + path;
  if (err == EFBIG)
    return "file size limit exceeded writing " + path;
  return "cannot " + doing + " " + path + ": " + std::strerror(err);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw TrainError(ioErrorMessage("create", tmp_, errno));
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::fail(int err) {
  discard();
  std::string message = ioErrorMessage("write", tmp_, err);
  if (err == ENOSPC || err == EDQUOT || err == EFBIG)
    message += " (the partial file was removed)";
  throw TrainError(message);
}

bool AtomicFile::tryWrite(const void* data, size_t size) noexcept {
  if (error_ != 0 || fd_ < 0)
    return false;
  error_ = writeAll(fd_, data, size);
  return error_ == 0;
}

void AtomicFile::write(std::string_view bytes) {
  if (!tryWrite(bytes.data(), bytes.size()))
    fail(error_ != 0 ? error_ : EBADF);
}

void AtomicFile::commit() {
  if (error_ != 0 || fd_ < 0)
    fail(error_ != 0 ? error_ : EBADF);
  // fsync before the rename: otherwise the rename can reach the disk before the contents, and
  // a power loss leaves PATH naming garbage. Delayed allocation can report ENOSPC only here.
  if (::fsync(fd_) != 0)
    fail(errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp_.c_str());
    throw TrainError(ioErrorMessage("write", tmp_, err));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_.c_str());
    throw TrainError("cannot rename " + tmp_ + " to " + path_ + ": " + std::strerror(err));
  }
  syncDirectory(parentDirectory(path_));
}

void writeFileAtomically(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

AppendFile::AppendFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw TrainError(ioErrorMessage("open", path_, errno));
}

AppendFile::~AppendFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

void AppendFile::append(std::string_view bytes) {
  if (int err = writeAll(fd_, bytes.data(), bytes.size()))
    throw TrainError(ioErrorMessage("write", path_, err));
}

void makeDirectories(const std::string& path) {
  if (path.empty() || isDirectory(path))
    return;
  std::string parent = parentDirectory(path);
  if (parent != path && parent != ".")
    makeDirectories(parent);
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    throw TrainError(ioErrorMessage("create directory", path, errno));
  if (!isDirectory(path))
    throw TrainError(path + " exists and is not a directory");
}

bool pathExists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> listDirectory(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d)
    throw TrainError("cannot read directory " + dir + ": " + std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d.get())) {
    std::string name = e->d_name;
    if (name != "." && name != "..")
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> readFileIfExists(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return std::nullopt;
    throw TrainError("cannot read " + path + ": " + std::strerror(errno));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw TrainError("cannot read " + path + ": " + std::strerror(err));
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void removeTree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return;
    throw TrainError("cannot remove " + path + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    for (const auto& name : listDirectory(path))
      removeTree(path + "/" + name);
    if (::rmdir(path.c_str()) != 0)
      throw TrainError("cannot remove " + path + ": " + std::strerror(errno));
  } else if (::unlink(path.c_str()) != 0) {
    throw TrainError("cannot remove " + path + ": " + std::strerror(errno));
  }
}

void syncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw TrainError("cannot open " + dir + " to sync it: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    throw TrainError("fsync " + dir + ": " + std::strerror(err));
}

std::string parentDirectory(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/')
    p.pop_back();
  size_t slash = p.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return p.substr(0, slash);
}

}  // namespace linac::trainer::detail
