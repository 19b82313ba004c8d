// Chunkwise-parallel forward (DESIGN.md section 4).
//
// Inside a chunk of L tokens starting from state S (rows = key channels c), let b_i be the
// cumulative log-decay b_i = sum_{s<=i} g_s (per channel for the diagonal class). Unrolling
//   S_i = diag(exp(g_i)) S_{i-1} + k_i x_i^T
// gives  S_i = diag(exp(b_i)) S + sum_{j<=i} diag(exp(b_i - b_j)) k_j x_j^T,          (1)
// where x_j = v_j for the additive rule. For the delta rule the update is
//   S_i = (I - beta_i k_i k_i^T) D_i S_{i-1} + beta_i k_i v_i^T = D_i S_{i-1} + k_i x_i^T,
//   x_i = beta_i (v_i - S_{i-1}^T D_i k_i)                                               (2)
// so it is the additive form with pseudo-values x. Substituting (1) into (2):
//   x_i + beta_i sum_{j<i} M_ij x_j = beta_i (v_i - S^T (k_i * exp(b_i))),
//   M_ij = sum_c k_ic k_jc exp(b_ic - b_jc),
// i.e. (I + A) X = diag(beta) V - diag(beta) (K * exp(b)) S with A = strictly-lower beta_i M_ij.
// The UT / WY transform solves it once per chunk: U = (I + A)^-1 diag(beta) V and
// W = (I + A)^-1 diag(beta) (K * exp(b)), then X = U - W S (forward substitution, A is strictly
// lower triangular so (I + A) is unit lower triangular).
//
// Every exponent used below is b_i - b_j with j <= i (or b_i itself), which is <= 0: factors are
// in [0, 1], so strongly decaying inputs underflow to 0 and never overflow. The pairwise form
// exp(b_ic - b_jc) is used for the diagonal class rather than q*exp(b) and k*exp(-b), which would
// overflow for cumulative log-decays of -1280 per chunk. b is summed in double: after a few
// strongly decaying tokens b reaches hundreds, where an fp32 ulp (3e-5 at 300) would become the
// relative error of every exp(b_i - b_j) between two mildly decaying tokens that follow.
#include "chunk_forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "cpu_kernels.h"

namespace linac::kernels::cpu {

namespace {

/// sum_c x_c y_c exp(bx_c - by_c). `channel_stride` 0 means one decay shared by all channels
/// (none / fixed / scalar classes): then it is exp(bx_0 - by_0) * (x . y), one exp per pair.
float decayedDot(const float* x, const float* y, const double* bx, const double* by, int64_t n,
                 int64_t channel_stride) {
  if (channel_stride == 0) return static_cast<float>(std::exp(bx[0] - by[0])) * dot(x, y, n);
  float sum = 0.0f;
  for (int64_t c = 0; c < n; ++c) sum += x[c] * y[c] * static_cast<float>(std::exp(bx[c] - by[c]));
  return sum;
}

}  // namespace

void chunkForwardHead(const RecurrenceKind& kind, const HeadInputs& in, float scale, int chunk,
                      float* out, std::vector<float>& state, std::vector<float>* chunk_starts) {
  const int64_t len = in.length(), dk = in.key_dim, dv = in.value_dim;
  const int64_t width = in.decay_width, cs = in.channel_stride;
  const bool delta = kind.update == UpdateRule::Delta;
  const bool inclusive = kind.readout == Readout::Inclusive;
  float* S = state.data();  // [dk, dv]

  std::vector<double> cum(chunk * width);        // [L, width] b_i
  std::vector<double> query_cum(chunk * width);  // [L, width] decay seen by q_i's readout
  std::vector<float> values(chunk * dv);         // [L, dv] v (additive) or pseudo-values x (delta)
  std::vector<float> w_rows, a_tri;              // delta only: W [L, dk], A [L, L]
  if (delta) {
    w_rows.resize(chunk * dk);
    a_tri.resize(chunk * chunk);
  }
  if (chunk_starts) chunk_starts->clear();

  for (int64_t start = 0; start < len; start += chunk) {
    const int64_t L = std::min<int64_t>(chunk, len - start);
    if (chunk_starts) chunk_starts->insert(chunk_starts->end(), state.begin(), state.end());
    const float* q = in.q.data() + start * dk;  // [L, dk]
    const float* k = in.k.data() + start * dk;  // [L, dk]
    const float* v = in.v.data() + start * dv;  // [L, dv]

    // Cumulative log-decays within the chunk (double). The inclusive readout sees b_i; the
    // exclusive one reads S_{i-1}, so it sees b_{i-1} (0 for the first token of the chunk).
    for (int64_t i = 0; i < L; ++i)
      for (int64_t w = 0; w < width; ++w) {
        const double previous = i > 0 ? cum[(i - 1) * width + w] : 0.0;
        cum[i * width + w] = previous + in.g[(start + i) * width + w];
        query_cum[i * width + w] = inclusive ? cum[i * width + w] : previous;
      }
    auto cumRow = [&](int64_t i) { return cum.data() + i * width; };

    if (delta) {
      // A_ij = beta_i M_ij (j < i); right-hand sides beta_i v_i and beta_i k_i exp(b_i).
      const float* beta = in.beta.data() + start;
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < i; ++j)
          a_tri[i * L + j] = beta[i] * decayedDot(k + i * dk, k + j * dk, cumRow(i), cumRow(j), dk, cs);
      for (int64_t i = 0; i < L; ++i) {
        float* u_i = values.data() + i * dv;
        float* w_i = w_rows.data() + i * dk;
        for (int64_t e = 0; e < dv; ++e) u_i[e] = beta[i] * v[i * dv + e];
        for (int64_t c = 0; c < dk; ++c) w_i[c] = beta[i] * k[i * dk + c] * static_cast<float>(std::exp(cumRow(i)[c * cs]));
        // Forward substitution: row i minus A_ij times the already-solved rows j < i.
        for (int64_t j = 0; j < i; ++j) {
          const float a = a_tri[i * L + j];
          for (int64_t e = 0; e < dv; ++e) u_i[e] -= a * values[j * dv + e];
          for (int64_t c = 0; c < dk; ++c) w_i[c] -= a * w_rows[j * dk + c];
        }
      }
      // X = U - W S.
      for (int64_t i = 0; i < L; ++i)
        for (int64_t c = 0; c < dk; ++c) {
          const float w_ic = w_rows[i * dk + c];
          for (int64_t e = 0; e < dv; ++e) values[i * dv + e] -= w_ic * S[c * dv + e];
        }
    } else {
      std::copy_n(v, L * dv, values.begin());
    }

    if (out) {
      for (int64_t i = 0; i < L; ++i) {
        float* o_i = out + (start + i) * dv;
        std::fill_n(o_i, dv, 0.0f);
        const float* q_i = q + i * dk;
        const double* qb = query_cum.data() + i * width;
        // Inter-chunk: (q_i * exp(b_i))^T S.
        for (int64_t c = 0; c < dk; ++c) {
          const float qc = q_i[c] * static_cast<float>(std::exp(qb[c * cs]));
          for (int64_t e = 0; e < dv; ++e) o_i[e] += qc * S[c * dv + e];
        }
        // Intra-chunk: causal (j <= i) or strictly causal (j < i) decayed scores.
        const int64_t last = inclusive ? i : i - 1;
        for (int64_t j = 0; j <= last; ++j) {
          const float score = decayedDot(q_i, k + j * dk, qb, cumRow(j), dk, cs);
          for (int64_t e = 0; e < dv; ++e) o_i[e] += score * values[j * dv + e];
        }
        if (!inclusive) {  // RWKV-6 bonus: ((q_i * u * k_i) . 1) v_i
          float bonus = 0.0f;
          for (int64_t c = 0; c < dk; ++c) bonus += q_i[c] * in.u[c] * k[i * dk + c];
          for (int64_t e = 0; e < dv; ++e) o_i[e] += bonus * v[i * dv + e];
        }
        for (int64_t e = 0; e < dv; ++e) o_i[e] *= scale;
      }
    }

    // State to the next chunk: S <- diag(exp(b_L)) S + sum_j diag(exp(b_L - b_j)) k_j x_j^T.
    const double* last_cum = cumRow(L - 1);
    for (int64_t c = 0; c < dk; ++c) {
      float* S_c = S + c * dv;
      const float carry = static_cast<float>(std::exp(last_cum[c * cs]));
      for (int64_t e = 0; e < dv; ++e) S_c[e] *= carry;
      for (int64_t j = 0; j < L; ++j) {
        const float kc = k[j * dk + c] * static_cast<float>(std::exp(last_cum[c * cs] - cumRow(j)[c * cs]));
        for (int64_t e = 0; e < dv; ++e) S_c[e] += kc * values[j * dv + e];
      }
    }
  }
}

void chunkForward(const RecurrenceKind& kind, const RecurrenceShape& shape,
                  const RecurrenceForwardArgs& args, DType dtype, int chunk) {
  validateRecurrence("linac::kernels::cpu::chunkForward", kind, shape, args, chunk);
  if (!args.o) throw std::invalid_argument("linac::kernels::cpu::chunkForward: o must be non-null");
  const int64_t sequences = numSequences(shape), heads = shape.heads;
  const int64_t dk = shape.key_dim, dv = shape.value_dim;
  parallelFor(sequences * heads, [&](int64_t task) {
    const int64_t n = task / heads, h = task % heads;
    const HeadInputs in = loadHeadInputs(kind, shape, args, dtype, n, h);
    std::vector<float> out(in.length() * dv);
    std::vector<float> state = in.h0;
    chunkForwardHead(kind, in, args.scale, chunk, out.data(), state, nullptr);
    storeRows(args.o, dtype, in.slice, dv, out.data());
    if (args.ht) std::copy(state.begin(), state.end(), args.ht + (n * heads + h) * dk * dv);
  });
}

}  // namespace linac::kernels::cpu
