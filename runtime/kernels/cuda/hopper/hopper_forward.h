// The Hopper (sm_90a) forward: wgmma stages for bf16 / fp16 inputs, dk in {64, 128, 256}, dv a
// multiple of 64 (64, 128, 256 or 512 for the delta rule): decay none / fixed / scalar with either
// update rule and the inclusive readout, and the additive rule with a diagonal decay, either
// readout (GLA, HGRN-2, RWKV-6; LINAC_HOPPER_DIAG=0 sends those back to the mma.sync path,
// LINAC_HOPPER_DIAG_K256=0 those at dk 256). dk 256 and dv above 256 (Gated DeltaNet's 340m heads)
// go back with LINAC_HOPPER_WIDE=0.
// chunkForward sends the calls it supports here on an sm_90 device with sm_90a code in the build;
// LINAC_HOPPER=0 in the environment turns the path off (for A/B timings). The delta rule's state
// stage keeps single-stage q / w tiles (late loads) at dk 256 always; at dk <= 128 forward() times
// late and early loads, each in the plain and the overlapped order, per shape class and keeps the
// fastest (kernels/cuda/autotune.h; LINAC_HOPPER_LATE / LINAC_HOPPER_OVERLAP =1 / =0 pin them).
// The additive rule's decays none / fixed / scalar take their chunk scores from a chunk-parallel
// preparation, or from the state stage with LINAC_HOPPER_PREPARED_SCORES=0 (=auto: timed the same
// way); with LINAC_HOPPER_SPLIT_STATE=1 they run the split form instead: a state pass carrying
// K^T V alone, then every chunk's output in parallel (forward_split.cuh; correct, but slower than
// the fused stage on an H100: kernels/cuda/NOTES.md, session 35). Where the state stage's grid
// leaves SMs idle (a padded batch of few sequences and heads), those stages run over segments of
// each sequence by default (segment_scan.cuh; LINAC_HOPPER_SEGMENTS=0 keeps whole sequences), or
// with LINAC_HOPPER_SEGMENTED_FUSED=1 (not yet run) the fused stage over the segments, its outputs
// corrected by their start states afterwards (segment_correct.cuh).
#pragma once

#include "../../common/recurrence.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace linac::kernels::cuda::hopper {

/// Whether every tensor starts 16-byte aligned: the stages read their inputs through tensor maps
/// (tma.cuh), which take no other; chunkForward / backwardSupported send the rest elsewhere.
inline bool tensorMapAligned(std::initializer_list<const void*> tensors) {
  for (const void* t : tensors)
    if (reinterpret_cast<uintptr_t>(t) % 16 != 0) return false;
  return true;
}

/// Whether forward() takes this call (and the current device is Hopper).
bool forwardSupported(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape);

/// Whether the delta rule's preparations, forward and backward, take X = (I + A)^-1 by two 32-row
/// halves on every warp (unit_lower_inverse.cuh), the default; LINAC_HOPPER_BLOCK_INVERSE=0: one
/// column per thread by forward substitution.
bool blockInverseEnabled();

/// Whether the diagonal decay at key dim 256 takes the Hopper stages, forward and backward (GLA's
/// forward at D256 1.59 ms against the mma.sync kernels' 6.58 on an H100, session 35); off with
/// LINAC_HOPPER_DIAG_K256=0, which sends it to the mma.sync kernels.
bool diagonalWideKeysEnabled();

/// Whether the serial state stages take value blocks of 16 columns where blocks of 32 make fewer
/// CTAs than SMs (long sequences with few heads): the forward's state stage (dk <= 128) and the
/// delta rule's backward state passes (Gated DeltaNet's forward at B2 T16384 H4 D128: 0.494 ms
/// against 0.649 in blocks of 32 on an H100, session 35); LINAC_HOPPER_NARROW_STATE=0 keeps 32.
bool narrowStateEnabled();

/// recurrence.h's forward (o, and ht when non-null) on the Hopper stages.
void forward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
             const RecurrenceForwardArgs& args, int64_t num_seqs, cudaStream_t stream);

}  // namespace linac::kernels::cuda::hopper
