// The kernels' workspace allocator (workspace.h).
#include "workspace.h"

#include "cuda_check.h"

namespace linac::kernels::cuda {
namespace {

WorkspaceAllocator& installed() {
  static WorkspaceAllocator allocator;
  return allocator;
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
    LINAC_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
}

Workspace::~Workspace() {
  if (ptr_ == nullptr) return;
  if (release_ != nullptr) release_(ptr_, stream_);
  else cudaFreeAsync(ptr_, stream_);  // a destructor does not throw: a failure resurfaces at the next checked call
}

}  // namespace linac::kernels::cuda
