// Facts about the current CUDA device that launches size their grids by.
#pragma once

#include "cuda_check.h"

#include <cuda_runtime.h>

namespace linac::kernels::cuda {

/// The current device's number of multiprocessors (asked at each call: a process may move between
/// devices of different sizes; the query reads the runtime's cached properties).
inline int multiprocessorCount() {
  int device = 0, count = 0;
  LINAC_CUDA_CHECK(cudaGetDevice(&device));
  LINAC_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

}  // namespace linac::kernels::cuda
