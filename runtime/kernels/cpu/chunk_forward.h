// Chunkwise-parallel forward of one (sequence, head): the algorithm behind cpu::chunkForward, also
// used by the backward to recompute the state at every chunk boundary.
#pragma once

#include <vector>

#include "head_inputs.h"

namespace linac::kernels::cpu {

/// Runs the recurrence of `in` chunk by chunk.
///   out      [len, dv] fp32 readout, written when non-null
///   state    [dk, dv]  in: the initial state, out: the final state
///   chunk_starts       when non-null, receives the state at the start of every chunk,
///                      ceil(len / chunk) matrices of [dk, dv] back to back
void chunkForwardHead(const RecurrenceKind& kind, const HeadInputs& in, float scale, int chunk,
                      float* out, std::vector<float>& state, std::vector<float>* chunk_starts);

}  // namespace linac::kernels::cpu
