// The Hopper (sm_90a) backward, bf16 / fp16 inputs, dk and dv in {64, 128} and the wider heads
// below:
//  - additive rule, decay none / fixed / scalar, inclusive readout (a fixed decay's dg is not
//    computed here): state passes and chunk-parallel gradients on wgmma (state_scan.cuh,
//    chunk_grad.cuh). chunkBackward takes it by default on a Hopper device (checked by the kernel
//    lab against its float64 reference on the H200; 2.5-2.8x faster than the mma.sync path,
//    bench/NOTES.md); LINAC_HOPPER_BWD=0 in the environment turns it off for A/B runs. At dk 256
//    the gradient by key and value blocks (chunk_grad_keys.cuh, chunk_grad_values.cuh; off with
//    LINAC_HOPPER_ADDITIVE_K256=0); both state passes in one launch (two with
//    LINAC_HOPPER_JOINT_STATE=0).
//  - delta rule (DeltaNet, Gated DeltaNet), decay none / scalar, d_beta requested: the five stages
//    of delta_backward_stages.cuh (fla's WY-form backward), by default as well since the kernel
//    lab checked it on the H200 (1.5-1.7x faster than the mma.sync path, bench/NOTES.md);
//    at dk, dv <= 128 stages 3 and 4 as one reverse pass (delta_bwd_reverse_grad.cuh) where it
//    times faster than the staged pair for the shape class (autotune.h;
//    LINAC_HOPPER_FUSED_REVERSE=1 / 0 pins either); dk 256 x dv 512 and dk = dv = 256 (the latter
//    off with LINAC_HOPPER_WIDE_BWD_V256=0); the state passes in value blocks of 16 where 32 leave
//    SMs idle (LINAC_HOPPER_NARROW_STATE=0 keeps 32).
//  - the diagonal decay's state passes and gradient stage (diag_state_scan.cuh, diag_key_grad.cuh
//    and diag_value_grad.cuh), called by chunk_backward_diagonal.cu in place of its passes 1, 2
//    and 3, by default for both readouts since the kernel lab and `linac verify` checked them on
//    the H200 (1.5x faster than those passes, bench/NOTES.md; Ks and Qs in two 16-bit halves where
//    the decay's gradient is marked precise, backward.cu); LINAC_HOPPER_DIAG_BWD=0 turns them
//    off, LINAC_HOPPER_DIAG_K256=0 at dk 256.
#pragma once

#include "../../common/recurrence.h"
#include "diag_grad_params.h"
#include "hopper_forward.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace linac::kernels::cuda::hopper {

/// Whether backward() takes this call (a Hopper device, a supported kind, LINAC_HOPPER_BWD != 0).
bool backwardSupported(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                       const RecurrenceBackwardArgs& args);

/// recurrence.h's backward: every non-null gradient written (not accumulated).
void backward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
              const RecurrenceBackwardArgs& args, int64_t num_seqs, cudaStream_t stream);

/// Whether diagonalStateScan() and diagonalGrad() take this call: either readout (neither with
/// LINAC_HOPPER_DIAG_BWD=0), a Hopper device with the sm_90a code built, 16-bit inputs, dk and dv
/// in {64, 128}, and the inclusive readout at dv a multiple of 128 (not with LINAC_HOPPER_DIAG_WIDE=0)
/// (value blocks of 128 columns, their dq / dk / dg summed in fp32); dk 256 at dv 128 or in value
/// blocks, either readout (not with LINAC_HOPPER_DIAG_K256=0).
bool diagonalGradSupported(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape);

/// The state workspaces (params.states, params.dstates, in the input dtype) and d_h0 (fp32, when
/// non-null) of every sequence and head: chunk_backward_diagonal.cu's pass 1
/// (chunk_backward_diagonal_scan.cu) on wgmma. Supported where diagonalGradSupported is.
void diagonalStateScan(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                       const DiagGradParams& params, cudaStream_t stream);

/// dq, dk, dv, d_g and the d_u partials (each when non-null) of every chunk slot and head, from
/// the state workspaces diagonalStateScan() wrote.
void diagonalGrad(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                  const DiagGradParams& params, int64_t slots, cudaStream_t stream);

}  // namespace linac::kernels::cuda::hopper
