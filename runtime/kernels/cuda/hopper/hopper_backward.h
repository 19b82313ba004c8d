// The Hopper (sm_90a) backward, bf16 / fp16 inputs, inclusive readout, dk and dv in {64, 128}:
//  - additive rule, decay none / fixed / scalar (a fixed decay's dg is not computed here): state
//    passes and chunk-parallel gradients on wgmma (state_scan.cuh, chunk_grad.cuh);
//  - delta rule (DeltaNet, Gated DeltaNet), decay none / scalar, d_beta requested: the five stages
//    of delta_backward_stages.cuh (fla's WY-form backward).
// Not yet run on an H200: chunkBackward takes this path only with LINAC_HOPPER_BWD=1 in the
// environment, so the kernel lab can check it against the float64 reference before it is the
// default.
#pragma once

#include "../../common/recurrence.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace linac::kernels::cuda::hopper {

/// Whether backward() takes this call (LINAC_HOPPER_BWD=1, a Hopper device and a supported kind).
bool backwardSupported(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                       const RecurrenceBackwardArgs& args);

/// recurrence.h's backward: every non-null gradient written (not accumulated).
void backward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
              const RecurrenceBackwardArgs& args, int64_t num_seqs, cudaStream_t stream);

}  // namespace linac::kernels::cuda::hopper
