// Error checking for every CUDA runtime call and kernel launch in linac's CUDA kernels.
// Library code never exits: a failure throws std::runtime_error naming file:line and the call.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace linac::kernels::cuda {

inline void throwCudaError(cudaError_t err, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": CUDA error in " +
                           what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                           ")");
}

}  // namespace linac::kernels::cuda

/// Wraps a CUDA runtime call: LINAC_CUDA_CHECK(cudaMemsetAsync(...)).
#define LINAC_CUDA_CHECK(call)                                                          \
  do {                                                                                  \
    cudaError_t linac_err_ = (call);                                                    \
    if (linac_err_ != cudaSuccess)                                                      \
      ::linac::kernels::cuda::throwCudaError(linac_err_, #call, __FILE__, __LINE__);    \
  } while (0)

/// After a kernel launch: reports launch-configuration errors (not asynchronous faults, which
/// surface at the next synchronizing call, itself checked).
#define LINAC_CUDA_CHECK_LAUNCH(name)                                                   \
  do {                                                                                  \
    cudaError_t linac_err_ = cudaGetLastError();                                        \
    if (linac_err_ != cudaSuccess)                                                      \
      ::linac::kernels::cuda::throwCudaError(linac_err_, "launch of " name, __FILE__,   \
                                             __LINE__);                                 \
  } while (0)

#define LINAC_REQUIRE(cond, msg)                                                        \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw std::invalid_argument(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                  ": " + (msg));                                        \
  } while (0)
