// Backward of the recurrence: gradients of <o, d_o> + <ht, d_ht>.
//
// Structure (DESIGN.md section 4, "backward recomputes chunk states"):
//   1. the chunkwise forward (chunk_forward.cpp) recomputes the state at the start of every chunk;
//   2. chunks are visited last to first carrying dS = d<loss>/dS; inside a chunk the per-token
//      states are rebuilt from the chunk's starting state (tokenStep) and the exact adjoint of
//      each token is applied in reverse order.
// Step 2 is the token-level reverse-mode derivative of DESIGN.md section 3, so it is exact for
// every decay class x update rule x readout, including the delta rule with per-channel decay;
// it costs O(L dk dv) per token like the forward state update. The matmul-shaped intra-chunk
// backward (fla's WY backward) is a speed optimisation left to the CUDA skeletons.
//
// Adjoint of one token, with P = S_{t-1}, P' = diag(lambda) P, lambda = exp(g_t):
//   readout inclusive  o = s S_t^T q            -> dq = s S_t do,  dS_t += s q do^T
//   readout bonus      o = s (P^T q + (q.(u*k)) v)
//                                               -> dq = s (P do + (v.do) u*k), dk += s (v.do) q*u,
//                                                  du += s (v.do) q*k, dv += s (q.(u*k)) do,
//                                                  dP += s q do^T
//   additive  S_t = P' + k v^T                  -> dk += dS_t v, dv += dS_t^T k, dP' = dS_t
//   delta     S_t = P' + k x^T, x = beta (v - w), w = P'^T k
//                                               -> dk += dS_t x, dx = dS_t^T k,
//                                                  dbeta = dx.(v - w), dv += beta dx,
//                                                  dw = -beta dx, dk += P' dw, dP' = dS_t + k dw^T
//   decay     P' = diag(lambda) P                -> dg_c = sum_e P'_ce dP'_ce, dP += diag(lambda) dP'
// The scalar and fixed classes share one g across channels (and tokens, for fixed), so their
// gradient is the sum of the per-channel gradients over the channels (and tokens) sharing it.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "chunk_forward.h"
#include "cpu_kernels.h"
#include "token_step.h"

namespace linac::kernels::cpu {

namespace {

/// Gradients of one (sequence, head), fp32, token-major.
struct HeadGradients {
  std::vector<float> dq, dk, dv;  // [len, dk], [len, dk], [len, dv]
  std::vector<float> dg;          // [len, decay_width]: per channel (diagonal) or summed (others)
  std::vector<float> dbeta;       // [len]
  std::vector<float> du;          // [dk]  this head's and sequence's share of d_u
  std::vector<float> dh0;         // [dk, dv]
};

HeadGradients backwardHead(const RecurrenceKind& kind, const HeadInputs& in,
                           const std::vector<float>& d_out, const float* d_final, float scale,
                           int chunk) {
  const int64_t len = in.length(), dk = in.key_dim, dv = in.value_dim;
  const int64_t cs = in.channel_stride, width = in.decay_width;
  const bool delta = kind.update == UpdateRule::Delta;
  const bool inclusive = kind.readout == Readout::Inclusive;
  const int64_t state_size = dk * dv;

  HeadGradients grad;
  grad.dq.assign(len * dk, 0.0f);
  grad.dk.assign(len * dk, 0.0f);
  grad.dv.assign(len * dv, 0.0f);
  grad.dg.assign(len * width, 0.0f);
  grad.dbeta.assign(delta ? len : 0, 0.0f);
  grad.du.assign(inclusive ? 0 : dk, 0.0f);

  // 1. States at chunk starts, from the chunkwise forward.
  std::vector<float> final_state = in.h0, chunk_starts;
  chunkForwardHead(kind, in, scale, chunk, nullptr, final_state, &chunk_starts);

  std::vector<float> dS(state_size, 0.0f);  // [dk, dv] adjoint of the current state
  if (d_final) std::copy_n(d_final, state_size, dS.begin());

  std::vector<float> states((chunk + 1) * state_size);  // S_{start-1} .. S_{start+L-1}
  std::vector<float> scratch(dv), lambda(dk), written(dv), d_written(dv), residual(dv);
  std::vector<double> dg_token(width);  // this token's dg, [decay_width]
  const int64_t num_chunks = (len + chunk - 1) / chunk;
  for (int64_t chunk_index = num_chunks - 1; chunk_index >= 0; --chunk_index) {
    const int64_t start = chunk_index * chunk, L = std::min<int64_t>(chunk, len - start);
    // 2a. Rebuild the per-token states of this chunk.
    std::copy_n(chunk_starts.begin() + chunk_index * state_size, state_size, states.begin());
    for (int64_t i = 0; i < L; ++i) {
      const int64_t t = start + i;
      float* S = states.data() + (i + 1) * state_size;
      std::copy_n(states.data() + i * state_size, state_size, S);
      tokenStep(kind, S, dk, dv, nullptr, in.k.data() + t * dk, in.v.data() + t * dv,
                in.g.data() + t * width, cs, delta ? in.beta[t] : 0.0f, nullptr, scale, nullptr,
                scratch.data());
    }
    // 2b. Token adjoints, last token first.
    for (int64_t i = L - 1; i >= 0; --i) {
      const int64_t t = start + i;
      const float* P = states.data() + i * state_size;         // S_{t-1}
      const float* S_t = states.data() + (i + 1) * state_size;  // S_t
      const float* q = in.q.data() + t * dk;
      const float* k = in.k.data() + t * dk;
      const float* v = in.v.data() + t * dv;
      const float* d_o = d_out.data() + t * dv;
      float* dq = grad.dq.data() + t * dk;
      float* dk_t = grad.dk.data() + t * dk;
      float* dv_t = grad.dv.data() + t * dv;
      for (int64_t c = 0; c < dk; ++c) lambda[c] = std::exp(in.logDecay(t, c));

      // Readout.
      float v_dot_do = 0.0f;
      if (inclusive) {
        for (int64_t c = 0; c < dk; ++c) {
          dq[c] = scale * dot(S_t + c * dv, d_o, dv);
          for (int64_t e = 0; e < dv; ++e) dS[c * dv + e] += scale * q[c] * d_o[e];
        }
      } else {
        v_dot_do = dot(v, d_o, dv);
        float bonus = 0.0f;
        for (int64_t c = 0; c < dk; ++c) {
          bonus += q[c] * in.u[c] * k[c];
          dq[c] = scale * (dot(P + c * dv, d_o, dv) + v_dot_do * in.u[c] * k[c]);
          dk_t[c] = scale * v_dot_do * q[c] * in.u[c];
          grad.du[c] += scale * v_dot_do * q[c] * k[c];
        }
        for (int64_t e = 0; e < dv; ++e) dv_t[e] = scale * bonus * d_o[e];
      }

      // Update: S_t = P' + k x^T with x = v (additive) or beta (v - P'^T k) (delta).
      if (delta) {
        const float beta = in.beta[t];
        for (int64_t e = 0; e < dv; ++e) residual[e] = v[e];  // v - w, w = P'^T k
        for (int64_t c = 0; c < dk; ++c)
          for (int64_t e = 0; e < dv; ++e) residual[e] -= k[c] * lambda[c] * P[c * dv + e];
        for (int64_t e = 0; e < dv; ++e) written[e] = beta * residual[e];
      } else {
        std::copy_n(v, dv, written.begin());
      }
      std::fill(d_written.begin(), d_written.end(), 0.0f);
      for (int64_t c = 0; c < dk; ++c) {
        dk_t[c] += dot(dS.data() + c * dv, written.data(), dv);
        for (int64_t e = 0; e < dv; ++e) d_written[e] += dS[c * dv + e] * k[c];
      }
      if (delta) {
        const float beta = in.beta[t];
        grad.dbeta[t] = dot(d_written.data(), residual.data(), dv);
        for (int64_t e = 0; e < dv; ++e) dv_t[e] += beta * d_written[e];
        // dw = -beta dx; dk += P' dw; dP' = dS_t + k dw^T (dS becomes dP' in place).
        for (int64_t c = 0; c < dk; ++c) {
          float acc = 0.0f;
          for (int64_t e = 0; e < dv; ++e) {
            const float dw = -beta * d_written[e];
            acc += lambda[c] * P[c * dv + e] * dw;
            dS[c * dv + e] += k[c] * dw;
          }
          dk_t[c] += acc;
        }
      } else {
        for (int64_t e = 0; e < dv; ++e) dv_t[e] += d_written[e];
      }

      // Decay: dg_c = sum_e P'_ce dP'_ce, then dP = diag(lambda) dP' (+ the bonus readout's s q do^T).
      // Accumulated in double: for the fixed and scalar classes dg sums these dot products
      // over channels (and tokens), where cancellation would amplify fp32 rounding.
      std::fill(dg_token.begin(), dg_token.end(), 0.0);
      for (int64_t c = 0; c < dk; ++c) {
        float* dS_c = dS.data() + c * dv;
        double dot_c = 0.0;
        for (int64_t e = 0; e < dv; ++e) dot_c += double(P[c * dv + e]) * double(dS_c[e]);
        dg_token[c * cs] += lambda[c] * dot_c;
        for (int64_t e = 0; e < dv; ++e) dS_c[e] *= lambda[c];
        if (!inclusive)
          for (int64_t e = 0; e < dv; ++e) dS_c[e] += scale * q[c] * d_o[e];
      }
      for (int64_t w = 0; w < width; ++w) grad.dg[t * width + w] = static_cast<float>(dg_token[w]);
    }
  }
  grad.dh0 = std::move(dS);
  return grad;
}

}  // namespace

void chunkBackward(const RecurrenceKind& kind, const RecurrenceShape& shape,
                   const RecurrenceBackwardArgs& args, DType dtype, int chunk) {
  const char* where = "linac::kernels::cpu::chunkBackward";
  validateRecurrence(where, kind, shape, args.fwd, chunk);
  if (!args.d_o) throw std::invalid_argument(std::string(where) + ": d_o must be non-null");
  const int64_t sequences = numSequences(shape), heads = shape.heads;
  const int64_t dk = shape.key_dim, dv = shape.value_dim, state_size = dk * dv;
  const int64_t tasks = sequences * heads;

  // Gradients shared by several (sequence, head) tasks are reduced after the parallel loop, in a
  // fixed order, so results do not depend on thread timing.
  std::vector<double> fixed_dg(tasks, 0.0);        // fixed class: per task total
  std::vector<float> bonus_du(tasks * dk, 0.0f);   // exclusive_bonus: per task share of d_u

  parallelFor(tasks, [&](int64_t task) {
    const int64_t n = task / heads, h = task % heads;
    const HeadInputs in = loadHeadInputs(kind, shape, args.fwd, dtype, n, h);
    std::vector<float> d_out(in.length() * dv);
    loadRows(args.d_o, dtype, in.slice, dv, d_out.data());
    const float* d_final = args.d_ht ? args.d_ht + task * state_size : nullptr;
    const HeadGradients grad = backwardHead(kind, in, d_out, d_final, args.fwd.scale, chunk);

    if (args.d_q) storeRows(args.d_q, dtype, in.slice, dk, grad.dq.data());
    if (args.d_k) storeRows(args.d_k, dtype, in.slice, dk, grad.dk.data());
    if (args.d_v) storeRows(args.d_v, dtype, in.slice, dv, grad.dv.data());
    if (args.d_h0) std::copy(grad.dh0.begin(), grad.dh0.end(), args.d_h0 + task * state_size);
    if (args.d_beta && kind.update == UpdateRule::Delta)
      for (int64_t t = 0; t < in.length(); ++t) args.d_beta[in.slice.row(t)] = grad.dbeta[t];
    if (kind.readout == Readout::ExclusiveBonus)
      std::copy(grad.du.begin(), grad.du.end(), bonus_du.begin() + task * dk);
    switch (kind.decay) {
      case DecayClass::None: break;
      case DecayClass::Fixed:
        for (float value : grad.dg) fixed_dg[task] += value;
        break;
      case DecayClass::Scalar:
        if (args.d_g)
          for (int64_t t = 0; t < in.length(); ++t) args.d_g[in.slice.row(t)] = grad.dg[t];
        break;
      case DecayClass::Diagonal:
        if (args.d_g)
          for (int64_t t = 0; t < in.length(); ++t)
            std::copy_n(grad.dg.begin() + t * dk, dk, args.d_g + in.slice.row(t) * dk);
        break;
    }
  });

  if (kind.decay == DecayClass::Fixed && args.d_g)
    for (int64_t h = 0; h < heads; ++h) {
      double total = 0.0;
      for (int64_t n = 0; n < sequences; ++n) total += fixed_dg[n * heads + h];
      args.d_g[h] = static_cast<float>(total);
    }
  if (kind.readout == Readout::ExclusiveBonus && args.d_u)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < dk; ++c) {
        double total = 0.0;
        for (int64_t n = 0; n < sequences; ++n) total += bonus_du[(n * heads + h) * dk + c];
        args.d_u[h * dk + c] = static_cast<float>(total);
      }
}

}  // namespace linac::kernels::cpu
