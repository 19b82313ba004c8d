#include "trainer/device_memory.h"

#include <ATen/DeviceAccelerator.h>
#include <c10/core/CachingDeviceAllocator.h>

namespace linac::trainer {
namespace {

c10::DeviceIndex indexOf(const torch::Device& device) {
  return device.has_index() ? device.index() : at::accelerator::getDeviceIndex();
}

}  // namespace

std::optional<int64_t> peakAllocatedBytes(const torch::Device& device) {
  if (device.is_cpu())
    return std::nullopt;
  const c10::CachingDeviceAllocator::DeviceStats stats =
      c10::getDeviceAllocator(device.type())->getDeviceStats(indexOf(device));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

void resetPeakAllocated(const torch::Device& device) {
  if (!device.is_cpu())
    c10::getDeviceAllocator(device.type())->resetPeakStats(indexOf(device));
}

void releaseCachedMemory(const torch::Device& device) {
  if (!device.is_cpu())
    c10::getDeviceAllocator(device.type())->emptyCache();
}

std::optional<int64_t> deviceTotalBytes(const torch::Device& device) {
  if (device.is_cpu())
    return std::nullopt;
  return static_cast<int64_t>(at::accelerator::getMemoryInfo(indexOf(device)).second);
}

}  // namespace linac::trainer
