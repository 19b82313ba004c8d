// Internal to runtime/ops: the recurrence kernels by device. CPU tensors run the portable C++
// kernels; CUDA tensors the CUDA kernels on the current stream of their device (built with
// LINAC_ENABLE_CUDA), or an error naming the op when linac was built without CUDA.
#pragma once

#include "kernels/common/recurrence.h"

#include <torch/types.h>

#include <cstdint>
#include <string_view>

namespace linac::ops::detail {

void chunkForward(std::string_view op, const torch::Device& device, const kernels::RecurrenceKind& kind,
                  kernels::DType dtype, const kernels::RecurrenceShape& shape,
                  const kernels::RecurrenceForwardArgs& args, int64_t chunk);

void chunkBackward(std::string_view op, const torch::Device& device, const kernels::RecurrenceKind& kind,
                   kernels::DType dtype, const kernels::RecurrenceShape& shape,
                   const kernels::RecurrenceBackwardArgs& args, int64_t chunk);

void recurrentStep(std::string_view op, const torch::Device& device, const kernels::RecurrenceKind& kind,
                   kernels::DType dtype, const kernels::RecurrenceShape& shape,
                   const kernels::RecurrenceStepArgs& args);

void scanForward(std::string_view op, const torch::Device& device, kernels::DType dtype,
                 const kernels::ScanShape& shape, const kernels::ScanForwardArgs& args);

void scanBackward(std::string_view op, const torch::Device& device, kernels::DType dtype,
                  const kernels::ScanShape& shape, const kernels::ScanBackwardArgs& args);

}  // namespace linac::ops::detail
