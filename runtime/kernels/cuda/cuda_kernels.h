// Host launchers of linac's CUDA kernel skeletons. They mirror the CPU entry points
// (runtime/kernels/cpu/cpu_kernels.h) with the element type explicit and a cudaStream_t; every
// pointer in the argument structs is a device pointer (cu_seqlens included). Launches are
// asynchronous on `stream`; launch and argument errors throw std::runtime_error /
// std::invalid_argument naming file:line (no exit() anywhere).
#pragma once

#include "../common/recurrence.h"

#include <cuda_runtime.h>

namespace linac::kernels::cuda {

/// Chunkwise forward (recurrence.h semantics): writes args.o [B, T, H, dv] and, when non-null,
/// args.ht [N, H, dk, dv]. Any DecayClass x UpdateRule x Readout. dk in {64, 128, 256},
/// dv a multiple of 64 (32 where the value block is 32), dtype bf16 / fp16 / fp32.
void chunkForward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                  const RecurrenceForwardArgs& args, cudaStream_t stream);

/// Chunkwise backward (chunk_backward.cu): exact, writes every non-null gradient. dk in
/// {64, 128, 256}, dv a multiple of 16. Allocates its workspace with cudaMallocAsync on `stream`.
void chunkBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                   const RecurrenceBackwardArgs& args, cudaStream_t stream);

/// One decode step for shape.batch sequences (shape.seq_len ignored): state updated in place,
/// o written. Any kind; dk <= 256; any dv.
void recurrentStep(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                   const RecurrenceStepArgs& args, cudaStream_t stream);

/// HGRN vector scan forward: h [B, T, D] and optionally ht [N, D].
void scanForward(DType dtype, const ScanShape& shape, const ScanForwardArgs& args,
                 cudaStream_t stream);

/// HGRN vector scan backward: d_x, d_g, d_h0; any may be null (h_{t-1} is recomputed in fp32).
void scanBackward(DType dtype, const ScanShape& shape, const ScanBackwardArgs& args,
                  cudaStream_t stream);

}  // namespace linac::kernels::cuda
