// The Hopper (sm_90a) backward, bf16 / fp16 inputs, inclusive readout, dk and dv in {64, 128}:
//  - additive rule, decay none / fixed / scalar (a fixed decay's dg is not computed here): state
//    passes and chunk-parallel gradients on wgmma (state_scan.cuh, chunk_grad.cuh). chunkBackward
//    takes it by default on a Hopper device (checked by the kernel lab against its float64
//    reference on the H200; 2.5-2.8x faster than the mma.sync path, bench/NOTES.md);
//    LINAC_HOPPER_BWD=0 in the environment turns it off for A/B runs.
//  - delta rule (DeltaNet, Gated DeltaNet), decay none / scalar, d_beta requested: the five stages
//    of delta_backward_stages.cuh (fla's WY-form backward), by default as well since the kernel
//    lab checked it on the H200 (1.5-1.7x faster than the mma.sync path, bench/NOTES.md).
#pragma once

#include "../../common/recurrence.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace linac::kernels::cuda::hopper {

/// Whether backward() takes this call (a Hopper device, a supported kind, LINAC_HOPPER_BWD != 0).
bool backwardSupported(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                       const RecurrenceBackwardArgs& args);

/// recurrence.h's backward: every non-null gradient written (not accumulated).
void backward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
              const RecurrenceBackwardArgs& args, int64_t num_seqs, cudaStream_t stream);

}  // namespace linac::kernels::cuda::hopper
