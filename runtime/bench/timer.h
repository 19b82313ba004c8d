// Median time of a callable: CUDA events on the current stream for CUDA work, the steady clock
// (after the work completes) on the CPU.
#pragma once

#include <functional>

namespace linac::bench {

double medianMs(const std::function<void()>& fn, bool cuda, int warmup, int iters);

}  // namespace linac::bench
