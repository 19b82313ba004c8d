// Shared plumbing of the CPU recurrence kernels: argument validation, the (sequence, head) work
// decomposition, gathering one (sequence, head) into fp32 buffers, and a small parallel-for.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../common/recurrence.h"
#include "tile.h"

namespace linac::kernels::cpu {

/// The fp32 inputs of one (sequence n, head h), token-major, as the chunk kernels consume them.
/// Every decay class is viewed through one accessor: logDecay(t, c) is g_t for key channel c.
struct HeadInputs {
  HeadSlice slice;
  int64_t sequence = 0;       // n
  int64_t key_dim = 0;        // dk
  int64_t value_dim = 0;      // dv
  std::vector<float> q;       // [len, dk]
  std::vector<float> k;       // [len, dk]
  std::vector<float> v;       // [len, dv]
  std::vector<float> g;       // [len, decay_width] log-decays (all zero for DecayClass::None)
  int64_t decay_width = 1;    // dk for Diagonal, 1 otherwise
  int64_t channel_stride = 0; // 1 for Diagonal, 0 otherwise (every channel reads column 0)
  std::vector<float> beta;    // [len] (delta only, else empty)
  const float* u = nullptr;   // [dk] bonus of this head (exclusive_bonus only)
  std::vector<float> h0;      // [dk, dv] initial state (zeros when not given)

  int64_t length() const { return slice.length; }
  float logDecay(int64_t t, int64_t c) const { return g[t * decay_width + c * channel_stride]; }
};

/// Number of independent sequences and the token range of sequence n.
int64_t numSequences(const RecurrenceShape& shape);
HeadSlice headSlice(const RecurrenceShape& shape, int64_t sequence, int64_t head);

/// Throws std::invalid_argument (message prefixed by `where`) when the call is malformed.
void validateRecurrence(const char* where, const RecurrenceKind& kind,
                        const RecurrenceShape& shape, const RecurrenceForwardArgs& args, int chunk);

/// Gathers the inputs of (sequence, head), converting q, k, v from `dtype` to fp32.
HeadInputs loadHeadInputs(const RecurrenceKind& kind, const RecurrenceShape& shape,
                          const RecurrenceForwardArgs& args, DType dtype, int64_t sequence,
                          int64_t head);

/// Runs body(i) for i in [0, count) on the process's thread pool (thread_pool.h). The first
/// exception thrown by a body is rethrown on the calling thread after every body has finished.
void parallelFor(int64_t count, const std::function<void(int64_t)>& body);

}  // namespace linac::kernels::cpu
