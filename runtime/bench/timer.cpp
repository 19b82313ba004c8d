#include "bench/timer.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef LINAC_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

#define LINAC_BENCH_CHECK(call)                                                                  \
  do {                                                                                         \
    cudaError_t err_ = (call);                                                                 \
    if (err_ != cudaSuccess)                                                                   \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + \
                               cudaGetErrorString(err_));                                      \
  } while (0)
#endif

namespace linac::bench {

double medianMs(const std::function<void()>& fn, bool cuda, int warmup, int iters) {
  std::vector<double> ms;
  for (int i = 0; i < warmup; ++i) fn();
  if (cuda) {
#ifdef LINAC_HAVE_CUDA
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    cudaEvent_t start, stop;
    LINAC_BENCH_CHECK(cudaEventCreate(&start));
    LINAC_BENCH_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < iters; ++i) {
      LINAC_BENCH_CHECK(cudaEventRecord(start, stream));
      fn();
      LINAC_BENCH_CHECK(cudaEventRecord(stop, stream));
      LINAC_BENCH_CHECK(cudaEventSynchronize(stop));
      float t = 0.0f;
      LINAC_BENCH_CHECK(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }
    LINAC_BENCH_CHECK(cudaEventDestroy(start));
    LINAC_BENCH_CHECK(cudaEventDestroy(stop));
#else
    throw std::invalid_argument("bench: this build has no CUDA");
#endif
  } else {
    for (int i = 0; i < iters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace linac::bench
