// The CPU kernels' thread pool: one set of workers per process, started on first use and reused
// by every kernel call (starting threads per call costs more than a small kernel's work). Its size
// follows the usual setting: OMP_NUM_THREADS when set (LibTorch's own pool reads it too, and
// `linac train --nproc N` sets it for each rank to the cores divided by N), else the cores this
// process may run on.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace linac::kernels::cpu {

/// A fixed pool: size() - 1 worker threads plus the calling thread run each job together.
class ThreadPool {
 public:
  /// Throws std::invalid_argument when threads < 1.
  explicit ThreadPool(int64_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads that run a job, the caller included.
  int64_t size() const { return int64_t(workers_.size()) + 1; }

  /// Runs body(i) for every i in [0, count) and returns when all have finished. Jobs from several
  /// threads run one after another; a job started from inside a body runs serially on that
  /// thread. The first exception thrown by a body is rethrown here once every body has finished.
  void run(int64_t count, const std::function<void(int64_t)>& body);

 private:
  void workerLoop();
  void work();  // takes indices of the current job until none are left

  std::vector<std::thread> workers_;
  std::mutex jobMutex_;  // one job at a time
  std::mutex mutex_;     // guards the fields below
  std::condition_variable wake_, finished_;
  bool stopping_ = false;
  uint64_t generation_ = 0;  // bumped for each job
  int64_t busy_ = 0;         // workers still inside the current job
  int64_t count_ = 0;
  const std::function<void(int64_t)>* body_ = nullptr;
  int64_t next_ = 0;
  std::exception_ptr error_;
};

/// The threads this process may run on (its CPU affinity mask), at least 1.
int64_t hardwareThreadCount();

/// The pool size for an OMP_NUM_THREADS value (nullptr when unset): its first entry when that is
/// a positive integer (OpenMP allows a list, one entry per nesting level), else `hardware`.
int64_t threadCountFor(const char* ompNumThreads, int64_t hardware);

/// threadCountFor(getenv("OMP_NUM_THREADS"), hardwareThreadCount()).
int64_t defaultThreadCount();

/// The process's pool, created on first use with defaultThreadCount() threads unless
/// setCpuThreadCount chose a size. Shared: a pool replaced meanwhile lives until its last job ends.
std::shared_ptr<ThreadPool> cpuThreadPool();

/// Replaces the process's pool by one of `threads` threads (throws std::invalid_argument when < 1).
void setCpuThreadCount(int64_t threads);

}  // namespace linac::kernels::cpu
