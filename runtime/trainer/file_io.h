// Files of a run directory, written so that no crash, kill or full disk leaves a truncated file
// under a name that matters: each is written to NAME.tmp in the same directory, fsynced, renamed
// over NAME (atomic within a filesystem), and the directory is fsynced. A failed write removes its
// temporary file, so a full disk is not kept full by it, and says "no space left on device" with
// the path. POSIX calls rather than std::filesystem: the PyPI libtorch exports an ABI-incompatible
// copy of some std::filesystem functions. Used by runtime/trainer and `linac sweep`'s folder; errors
// are TrainError.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace linac::trainer::detail {

/// "no space left on device writing PATH" (ENOSPC, EDQUOT), "file size limit exceeded writing
/// PATH" (EFBIG), else "cannot <doing> PATH: <strerror>".
std::string ioErrorMessage(const std::string& doing, const std::string& path, int err);

/// PATH.tmp, renamed over PATH by commit(); destroyed uncommitted, it removes PATH.tmp and PATH
/// keeps its previous contents.
class AtomicFile {
public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends bytes; on failure removes the temporary file and throws TrainError.
  void write(std::string_view bytes);
  /// For callbacks that must not throw (LibTorch's archive writer): false once a write failed;
  /// error() then holds its errno and the caller calls fail().
  bool tryWrite(const void* data, size_t size) noexcept;
  int error() const { return error_; }
  /// Removes the temporary file and throws the TrainError for `err` (e.g. error()).
  [[noreturn]] void fail(int err);
  /// fsync, close, rename over path(), fsync the directory; throws TrainError on failure.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& tmpPath() const { return tmp_; }

private:
  void discard() noexcept;
  std::string path_, tmp_;
  int fd_ = -1;
  int error_ = 0;
};

/// AtomicFile in one call.
void writeFileAtomically(const std::string& path, std::string_view contents);

/// A file opened for appending whole lines (metrics.jsonl), every write checked.
class AppendFile {
public:
  explicit AppendFile(std::string path);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  void append(std::string_view bytes);

private:
  std::string path_;
  int fd_ = -1;
};

/// mkdir -p; throws TrainError.
void makeDirectories(const std::string& path);
bool pathExists(const std::string& path);
bool isDirectory(const std::string& path);
/// Entry names of `dir` (without . and ..), sorted; throws TrainError when it cannot be read.
std::vector<std::string> listDirectory(const std::string& dir);
/// The file's bytes, nullopt when it does not exist; throws TrainError on other failures.
std::optional<std::string> readFileIfExists(const std::string& path);
/// rm -rf of one entry; throws TrainError on failure.
void removeTree(const std::string& path);
/// fsync of a directory, so renames and deletions in it survive a power loss.
void syncDirectory(const std::string& dir);
/// "a/b" for "a/b/c", "." for "c".
std::string parentDirectory(const std::string& path);

}  // namespace linac::trainer::detail
