// The CUDA stream torch enqueues work on for a device: where linac's ops launch their kernels
// (the caller holds a CUDAGuard for the device). CUDA builds only (LINAC_HAVE_CUDA).
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <torch/types.h>

namespace linac::ops {

inline cudaStream_t currentStream(const torch::Device& device) {
  return at::cuda::getCurrentCUDAStream(device.index()).stream();
}

}  // namespace linac::ops
