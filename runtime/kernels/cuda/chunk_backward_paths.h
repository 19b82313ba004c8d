// Internal entries of the tensor-core chunkwise backward paths that chunkBackward
// (chunk_backward.cu) dispatches to before falling back to the exact per-token kernel. Each path
// has a predicate (kind and shape it supports) and an entry that writes every non-null gradient of
// args. Shapes as in recurrence.h; arguments validated by chunkBackward. Not public API
// (cuda_kernels.h is).
#pragma once

#include "../common/recurrence.h"

#include <cuda_runtime.h>

namespace linac::kernels::cuda {

// ---- additive rule, scalar-or-coarser decay (chunk_backward_additive.cu) ------------------------
/// True for {Additive, Inclusive, decay None / Fixed / Scalar}, dk in {64, 128, 256}, dv a
/// positive multiple of 64.
bool additiveBackwardSupported(const RecurrenceKind& kind, const RecurrenceShape& shape);

/// Writes every non-null gradient of args (d_q, d_k, d_v, d_g, d_h0); fla's chunk_simple_gla
/// backward on tensor cores. num_seqs = N (B, or the number of varlen sequences).
void additiveChunkBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                           const RecurrenceBackwardArgs& args, int num_seqs, cudaStream_t stream);

/// fp32 additive rule, inclusive readout, Fixed decay: writes d_g [H] in double from the inputs
/// alone (q, k, v, d_o, g, h0, d_ht; chunk_backward_fixed_dg.cu), dk 64, 128 or 256 and any dv.
/// Both the tensor-core additive path and the exact kernel form their fp32 fixed-class d_g this
/// way: from fp32 states under cancellation it missed the 1e-5 gate on some draws (NOTES.md,
/// "fp32 additive backward's d_g").
void fixedClassDgFromInputs(const RecurrenceShape& shape, const RecurrenceBackwardArgs& args, int num_seqs,
                            cudaStream_t stream);

// ---- delta rule (chunk_backward_delta.cu) --------------------------------------------------------
/// True for {Delta, Inclusive, decay None / Fixed / Scalar}, dk in {64, 128, 256}, dv a positive
/// multiple of 64.
bool deltaBackwardSupported(const RecurrenceKind& kind, const RecurrenceShape& shape);

/// Writes every non-null gradient of args (d_q, d_k, d_v, d_g, d_beta, d_h0); fla's WY-form
/// chunk_gated_delta_rule backward on tensor cores. num_seqs = N (B, or the number of varlen
/// sequences).
void deltaChunkBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                        const RecurrenceBackwardArgs& args, int num_seqs, cudaStream_t stream);

// ---- additive rule, diagonal decay (chunk_backward_diagonal.cu) ---------------------------------
/// True for {Additive, decay Diagonal, readout Inclusive or ExclusiveBonus}, dk in {64, 128, 256},
/// dv a positive multiple of 64.
bool diagonalBackwardSupported(const RecurrenceKind& kind, const RecurrenceShape& shape);

/// Writes every non-null gradient of args (d_q, d_k, d_v, d_g, d_u, d_h0); fla's chunk_gla
/// backward on tensor cores. num_seqs = N (B, or the number of varlen sequences), 2 N <= 65535.
void diagonalChunkBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                           const RecurrenceBackwardArgs& args, int num_seqs, cudaStream_t stream);

}  // namespace linac::kernels::cuda
