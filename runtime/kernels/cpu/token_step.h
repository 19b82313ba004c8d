// One token of the recurrence, written exactly as DESIGN.md section 3 states it. Used by the
// decode kernel (recurrent_step.cpp) and by the backward to rebuild per-token states inside a chunk.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/recurrence.h"
#include "tile.h"

namespace linac::kernels::cpu {

/// Advances S [dk, dv] (row c = key channel) by one token, in place.
///   g_row       log-decay of the token, channel c reads g_row[c * channel_stride]; null = no decay
///   beta        delta rule only;  u [dk]: exclusive_bonus only
///   out         [dv] scaled readout, written when non-null
///   scratch     [dv] workspace (delta rule)
inline void tokenStep(const RecurrenceKind& kind, float* S, int64_t dk, int64_t dv, const float* q,
                      const float* k, const float* v, const float* g_row, int64_t channel_stride,
                      float beta, const float* u, float scale, float* out, float* scratch) {
  const bool inclusive = kind.readout == Readout::Inclusive;
  if (out && !inclusive) {  // o = scale * (S_{t-1}^T q + ((q * u * k) . 1) v)
    float bonus = 0.0f;
    for (int64_t c = 0; c < dk; ++c) bonus += q[c] * u[c] * k[c];
    for (int64_t e = 0; e < dv; ++e) out[e] = bonus * v[e];
    for (int64_t c = 0; c < dk; ++c)
      for (int64_t e = 0; e < dv; ++e) out[e] += q[c] * S[c * dv + e];
    for (int64_t e = 0; e < dv; ++e) out[e] *= scale;
  }
  if (g_row)
    for (int64_t c = 0; c < dk; ++c) {
      const float lambda = std::exp(g_row[c * channel_stride]);
      for (int64_t e = 0; e < dv; ++e) S[c * dv + e] *= lambda;
    }
  const float* written = v;  // the value written along k: v, or the delta rule's beta (v - S^T k)
  if (kind.update == UpdateRule::Delta) {
    for (int64_t e = 0; e < dv; ++e) scratch[e] = v[e];
    for (int64_t c = 0; c < dk; ++c)
      for (int64_t e = 0; e < dv; ++e) scratch[e] -= k[c] * S[c * dv + e];
    for (int64_t e = 0; e < dv; ++e) scratch[e] *= beta;
    written = scratch;
  }
  for (int64_t c = 0; c < dk; ++c)
    for (int64_t e = 0; e < dv; ++e) S[c * dv + e] += k[c] * written[e];
  if (out && inclusive) {  // o = scale * S_t^T q
    for (int64_t e = 0; e < dv; ++e) out[e] = 0.0f;
    for (int64_t c = 0; c < dk; ++c)
      for (int64_t e = 0; e < dv; ++e) out[e] += q[c] * S[c * dv + e];
    for (int64_t e = 0; e < dv; ++e) out[e] *= scale;
  }
}

}  // namespace linac::kernels::cpu
