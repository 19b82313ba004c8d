// The device memory a training step takes at its peak, from the device's caching allocator
// (c10::DeviceAllocator, the interface CUDA's caching allocator implements): nothing here names
// CUDA, so the trainer builds and runs the same without a CUDA toolkit.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>

namespace linac::trainer {

/// Bytes in a GiB, for the peak-memory reports.
inline constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

/// The most bytes the allocator of `device` had allocated at once since the last
/// resetPeakAllocated (or the start); nullopt on the CPU, which has no such allocator.
std::optional<int64_t> peakAllocatedBytes(const torch::Device& device);

/// Starts a new peak at the bytes allocated now; nothing on the CPU.
void resetPeakAllocated(const torch::Device& device);

/// Returns the allocator's cached, unused blocks to the device (after an out-of-memory error, so
/// that the next attempt starts from what is really in use); nothing on the CPU.
void releaseCachedMemory(const torch::Device& device);

/// The device's total memory in bytes; nullopt on the CPU.
std::optional<int64_t> deviceTotalBytes(const torch::Device& device);

}  // namespace linac::trainer
