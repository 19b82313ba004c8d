// The recurrence kernels by device (header: kernel_dispatch.h).
#include "kernel_dispatch.h"

#include "kernels/cpu/cpu_kernels.h"

#include <stdexcept>
#include <string>

#ifdef LINAC_HAVE_CUDA
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/workspace.h"
#include "ops/cuda_stream.h"
#endif

namespace linac::ops::detail {
namespace {

#ifdef LINAC_HAVE_CUDA
// The kernels' scratch memory comes from torch's caching allocator (kernels/cuda/workspace.h): it
// shares torch's pool instead of a second one beside it, counts in torch's peak statistics, and
// when memory runs out torch frees its cached blocks, retries, and raises c10::OutOfMemoryError
// (which `linac train --find-batch` treats as "does not fit").
void* torchWorkspace(size_t bytes, cudaStream_t stream) {
  return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, stream);
}
void releaseTorchWorkspace(void* ptr, cudaStream_t) { c10::cuda::CUDACachingAllocator::raw_delete(ptr); }

[[maybe_unused]] const bool kWorkspacesFromTorch = [] {
  kernels::cuda::setWorkspaceAllocator({&torchWorkspace, &releaseTorchWorkspace});
  return true;
}();
#endif

#ifndef LINAC_HAVE_CUDA
[[noreturn]] void noCuda(std::string_view op) {
  throw std::invalid_argument(std::string(op) + ": CUDA tensors, but linac was built without CUDA");
}
#endif

}  // namespace

void chunkForward([[maybe_unused]] std::string_view op, const torch::Device& device,
                  const kernels::RecurrenceKind& kind, kernels::DType dtype,
                  const kernels::RecurrenceShape& shape, const kernels::RecurrenceForwardArgs& args,
                  int64_t chunk) {
  if (device.is_cuda()) {
#ifdef LINAC_HAVE_CUDA
    const c10::cuda::CUDAGuard guard(device);
    kernels::cuda::chunkForward(kind, dtype, shape, args, currentStream(device));
    return;
#else
    noCuda(op);
#endif
  }
  kernels::cpu::chunkForward(kind, shape, args, dtype, static_cast<int>(chunk));
}

void chunkBackward([[maybe_unused]] std::string_view op, const torch::Device& device,
                   const kernels::RecurrenceKind& kind, kernels::DType dtype,
                   const kernels::RecurrenceShape& shape,
                   const kernels::RecurrenceBackwardArgs& args, int64_t chunk) {
  if (device.is_cuda()) {
#ifdef LINAC_HAVE_CUDA
    const c10::cuda::CUDAGuard guard(device);
    // torch's deterministic mode (torch.use_deterministic_algorithms, `linac train
    // --deterministic`): an error (or, warn-only, a warning) for a path that sums with atomics.
    if (at::globalContext().deterministicAlgorithms())
      if (const char* atomics = kernels::cuda::chunkBackwardAtomics(kind, dtype, shape, args))
        at::globalContext().alertNotDeterministic(std::string(op) + " backward on CUDA, " + atomics);
    kernels::cuda::chunkBackward(kind, dtype, shape, args, currentStream(device));
    return;
#else
    noCuda(op);
#endif
  }
  kernels::cpu::chunkBackward(kind, shape, args, dtype, static_cast<int>(chunk));
}

void recurrentStep([[maybe_unused]] std::string_view op, const torch::Device& device,
                   const kernels::RecurrenceKind& kind, kernels::DType dtype,
                   const kernels::RecurrenceShape& shape, const kernels::RecurrenceStepArgs& args) {
  if (device.is_cuda()) {
#ifdef LINAC_HAVE_CUDA
    const c10::cuda::CUDAGuard guard(device);
    kernels::cuda::recurrentStep(kind, dtype, shape, args, currentStream(device));
    return;
#else
    noCuda(op);
#endif
  }
  kernels::cpu::recurrentStep(kind, shape.batch, shape.heads, shape.key_dim, shape.value_dim, args,
                              dtype);
}

void scanForward([[maybe_unused]] std::string_view op, const torch::Device& device,
                 kernels::DType dtype, const kernels::ScanShape& shape,
                 const kernels::ScanForwardArgs& args) {
  if (device.is_cuda()) {
#ifdef LINAC_HAVE_CUDA
    const c10::cuda::CUDAGuard guard(device);
    kernels::cuda::scanForward(dtype, shape, args, currentStream(device));
    return;
#else
    noCuda(op);
#endif
  }
  kernels::cpu::scanForward(shape, args, dtype);
}

void scanBackward([[maybe_unused]] std::string_view op, const torch::Device& device,
                  kernels::DType dtype, const kernels::ScanShape& shape,
                  const kernels::ScanBackwardArgs& args) {
  if (device.is_cuda()) {
#ifdef LINAC_HAVE_CUDA
    const c10::cuda::CUDAGuard guard(device);
    kernels::cuda::scanBackward(dtype, shape, args, currentStream(device));
    return;
#else
    noCuda(op);
#endif
  }
  kernels::cpu::scanBackward(shape, args, dtype);
}

}  // namespace linac::ops::detail
