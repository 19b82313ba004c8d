#include "thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#ifdef __linux__
#include <sched.h>
#endif

namespace linac::kernels::cpu {

namespace {

// True on a thread while it runs a pool job's body: a job started there runs serially.
thread_local bool insideJob = false;

std::mutex poolMutex;                  // guards pool
std::shared_ptr<ThreadPool> pool;      // the process's pool

}  // namespace

ThreadPool::ThreadPool(int64_t threads) {
  if (threads < 1)
    throw std::invalid_argument("linac::kernels::cpu::ThreadPool: threads must be >= 1, got " +
                                std::to_string(threads));
  workers_.reserve(size_t(threads - 1));
  for (int64_t w = 1; w < threads; ++w) workers_.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::work() {
  insideJob = true;
  for (;;) {
    int64_t i;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_ >= count_) break;
      i = next_++;
    }
    try {
      (*body_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  insideJob = false;
}

void ThreadPool::workerLoop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    work();
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_ == 0) finished_.notify_one();
  }
}

void ThreadPool::run(int64_t count, const std::function<void(int64_t)>& body) {
  if (count <= 0) return;
  if (insideJob || workers_.empty() || count == 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::lock_guard<std::mutex> job(jobMutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count_ = count;
    body_ = &body;
    next_ = 0;
    error_ = nullptr;
    busy_ = int64_t(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  work();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return busy_ == 0; });
    body_ = nullptr;
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

int64_t hardwareThreadCount() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

int64_t threadCountFor(const char* ompNumThreads, int64_t hardware) {
  if (ompNumThreads) {
    const std::string value(ompNumThreads);
    const std::string first = value.substr(0, value.find(','));
    char* end = nullptr;
    const long long n = first.empty() ? 0 : std::strtoll(first.c_str(), &end, 10);
    if (n > 0 && end && *end == '\0') return n;
  }
  return std::max<int64_t>(1, hardware);
}

int64_t defaultThreadCount() { return threadCountFor(std::getenv("OMP_NUM_THREADS"), hardwareThreadCount()); }

std::shared_ptr<ThreadPool> cpuThreadPool() {
  std::lock_guard<std::mutex> lock(poolMutex);
  if (!pool) pool = std::make_shared<ThreadPool>(defaultThreadCount());
  return pool;
}

void setCpuThreadCount(int64_t threads) {
  auto replacement = std::make_shared<ThreadPool>(threads);
  std::shared_ptr<ThreadPool> previous;  // joined outside the lock, after its last job
  std::lock_guard<std::mutex> lock(poolMutex);
  previous = std::exchange(pool, std::move(replacement));
}

}  // namespace linac::kernels::cpu
