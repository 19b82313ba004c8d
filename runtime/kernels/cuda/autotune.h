// Measured choices between correct ways to run one kernel call. Where an entry point has several
// (the delta backward's stages 3 and 4 staged or as one pass, the forward state stage's tiles and
// load order) and which is fastest depends on the GPU and the shape, it offers them here as
// candidates: the first call of each shape class times them all on the call's own inputs, keeps
// the fastest in the autotune cache (kernels/common/autotune_cache.h: keyed by build, GPU, choice
// point and shape class, on disk across processes), prints the timings once to stderr, and every
// later call takes the recorded winner.
//
// Environment: LINAC_AUTOTUNE=0 never times (each point takes its fallback, the path's heuristic:
// the same choice on every GPU); LINAC_AUTOTUNE_CACHE=FILE moves the cache ("" keeps it in memory).
#pragma once

#include "../common/recurrence.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace linac::kernels::cuda {

/// One way to run a call: its name, as the cache and the report print it, and a function that
/// queues the whole call on the stream given to chooseCandidate. Each must write its outputs (not
/// accumulate into them), so that running it again, or another candidate after it, is harmless.
struct TuneCandidate {
  std::string name;
  std::function<void()> launch;
};

/// Whether chooseCandidate may time candidates: LINAC_AUTOTUNE unset or anything but "0".
bool autotuneEnabled();

/// The index of the candidate to run for this call of choice point `point` on `stream`'s device:
/// the one recorded for this build, GPU, point, candidate names and `shape`; else, when timing is
/// enabled and the stream is not capturing a CUDA graph, the fastest by the median of five timed
/// runs of each (interleaved, after one warm-up run each), recorded; else `fallback`. A candidate
/// that throws while timed fails the call, as it would untimed. The caller then runs the returned
/// candidate, so that the outputs are the chosen path's even on the call that timed.
size_t chooseCandidate(const std::string& point, const std::string& shape,
                       const std::vector<TuneCandidate>& candidates, size_t fallback,
                       cudaStream_t stream);

/// The shape class of a recurrence call, as the cache keys it: the element type, decay class and
/// rule, dk, dv, sequences x heads and tokens per sequence (both rounded up to a power of two, so
/// that nearby shapes share a choice), and "varlen" for packed sequences.
std::string recurrenceShapeClass(const RecurrenceKind& kind, DType dtype,
                                 const RecurrenceShape& shape, int64_t num_seqs);

}  // namespace linac::kernels::cuda
