// The kernels' workspace allocator (workspace.h).
#include "workspace.h"

#include "cuda_check.h"

#include <cstdint>
#include <map>
#include <mutex>

namespace linac::kernels::cuda {
namespace {

WorkspaceAllocator& installed() {
  static WorkspaceAllocator allocator;
  return allocator;
}

/// The kernels' own stream-ordered pool on the current device, created on first use. It keeps what
/// it has reserved (release threshold: everything): the device's default pool hands its memory
/// back to the driver at every synchronisation, so a caller that synchronises between calls paid
/// for mapping each call's workspace afresh (the kernel lab's delta forward measured 0.54-0.67 ms
/// against 0.38 through torch's caching allocator on an H100, bench/NOTES.md, session 25). A
/// separate pool leaves the process's default pool as its owner configured it. Null where the
/// device cannot create one (the workspaces then come from the default pool, as before).
cudaMemPool_t workspacePool() {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;
  int device = 0;
  LINAC_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = pools.find(device);
  if (it == pools.end()) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    if (cudaMemPoolCreate(&pool, &props) == cudaSuccess) {
      uint64_t keepAll = UINT64_MAX;
      LINAC_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keepAll));
    } else {
      cudaGetLastError();  // not sticky: clear it and keep to the default pool
      pool = nullptr;
    }
    it = pools.emplace(device, pool).first;
  }
  return it->second;
}

}  // namespace

void setWorkspaceAllocator(WorkspaceAllocator allocator) {
  LINAC_REQUIRE((allocator.allocate == nullptr) == (allocator.release == nullptr),
                "setWorkspaceAllocator: give both allocate and release, or neither");
  installed() = allocator;
}

Workspace::Workspace(size_t bytes, cudaStream_t stream) : stream_(stream) {
  if (bytes == 0) return;
  const WorkspaceAllocator& a = installed();
  if (a.allocate != nullptr) {
    ptr_ = a.allocate(bytes, stream);
    release_ = a.release;
  } else {
    if (cudaMemPool_t pool = workspacePool())
      LINAC_CUDA_CHECK(cudaMallocFromPoolAsync(&ptr_, bytes, pool, stream));
    else
      LINAC_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
}

Workspace::~Workspace() {
  if (ptr_ == nullptr) return;
  if (release_ != nullptr) release_(ptr_, stream_);
  else cudaFreeAsync(ptr_, stream_);  // a destructor does not throw: a failure resurfaces at the next checked call
}

}  // namespace linac::kernels::cuda
