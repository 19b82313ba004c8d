// Scratch memory of the CUDA kernels: the backward's state workspaces, the Hopper forward's W, U
// and P, the scan's chunk summaries. Every kernel entry point takes it from one stream-ordered
// allocator, by default cudaMallocFromPoolAsync / cudaFreeAsync on a pool of the kernels' own per
// device that keeps the memory it has reserved for later calls (a process without a caching
// allocator, as the C API's callers and the kernel lab, would otherwise map each call's workspace
// afresh after every synchronisation). A host that owns the device's memory
// installs its own (the LibTorch runtime installs c10's caching allocator, ops/kernel_dispatch.cpp),
// so the kernels' scratch shares its pool, shows in its peak statistics, and running out of memory
// there is its own error, raised after it has released its cached blocks and tried again.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace linac::kernels::cuda {

/// A stream-ordered allocator: `allocate` returns `bytes` of device memory usable by work queued
/// on `stream` (it throws when it cannot); `release` gives it back once that work is queued.
struct WorkspaceAllocator {
  void* (*allocate)(size_t bytes, cudaStream_t stream) = nullptr;
  void (*release)(void* ptr, cudaStream_t stream) = nullptr;
};

/// Installs `allocator` for every later workspace of this process; an empty one restores the
/// kernels' own pool. Not synchronised with kernels running on other host threads:
/// install it once, before the first launch.
void setWorkspaceAllocator(WorkspaceAllocator allocator);

/// Scratch memory for the kernels an entry point queues on `stream`, released when it goes out of
/// scope: after those launches are queued, which stream order makes safe (and on an exception,
/// so a failed launch leaks nothing).
class Workspace {
 public:
  Workspace(size_t bytes, cudaStream_t stream);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  void (*release_)(void* ptr, cudaStream_t stream) = nullptr;  // the allocator's, or null: cudaFreeAsync
};

}  // namespace linac::kernels::cuda
