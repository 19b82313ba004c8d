#include "oracle/oracle.h"

#include <stdexcept>
#include <string>

#include <torch/torch.h>

namespace linac::oracle {

namespace {

using kernels::DecayClass;
using kernels::Readout;
using kernels::RecurrenceKind;
using kernels::UpdateRule;

/// exp(g_t) broadcastable against the state [B, H, dk, dv], or undefined for no decay.
torch::Tensor decayAt(const RecurrenceKind& kind, const torch::Tensor& g, int64_t t) {
  switch (kind.decay) {
    case DecayClass::None: return {};
    case DecayClass::Fixed: return g.exp().view({1, -1, 1, 1});                     // [H]
    case DecayClass::Scalar: return g.select(1, t).exp().unsqueeze(-1).unsqueeze(-1);  // [B, H]
    case DecayClass::Diagonal: return g.select(1, t).exp().unsqueeze(-1);          // [B, H, dk]
  }
  throw std::invalid_argument("linac::oracle: unknown decay class");
}

/// One batch of equal-length sequences: in.q is [B, T, H, dk], h0 [B, H, dk, dv] or undefined.
RecurrenceOutputs dense(const RecurrenceKind& kind, const RecurrenceInputs& in) {
  const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2);
  const int64_t dk = in.q.size(3), dv = in.v.size(3);
  torch::Tensor S = in.h0.defined() ? in.h0 : torch::zeros({B, H, dk, dv}, in.q.options());
  std::vector<torch::Tensor> outputs;
  outputs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    const torch::Tensor q = in.q.select(1, t), k = in.k.select(1, t), v = in.v.select(1, t);
    torch::Tensor bonus_out;
    if (kind.readout == Readout::ExclusiveBonus) {
      // S_{t-1}^T q + ((q * u * k) . 1) v
      const torch::Tensor read = (S * q.unsqueeze(-1)).sum(-2);
      const torch::Tensor weight = (q * in.u.unsqueeze(0) * k).sum(-1, /*keepdim=*/true);
      bonus_out = in.scale * (read + weight * v);
    }
    torch::Tensor decayed = S;
    if (const torch::Tensor lambda = decayAt(kind, in.g, t); lambda.defined()) decayed = lambda * S;
    torch::Tensor written = v;
    if (kind.update == UpdateRule::Delta) {
      // (I - b k k^T) D S + b k v^T = D S + k (b (v - (D S)^T k))^T
      const torch::Tensor recalled = (decayed * k.unsqueeze(-1)).sum(-2);  // [B, H, dv]
      written = in.beta.select(1, t).unsqueeze(-1) * (v - recalled);
    }
    S = decayed + k.unsqueeze(-1) * written.unsqueeze(-2);
    if (kind.readout == Readout::Inclusive)
      outputs.push_back(in.scale * (S * q.unsqueeze(-1)).sum(-2));
    else
      outputs.push_back(bonus_out);
  }
  torch::Tensor o = T > 0 ? torch::stack(outputs, 1) : torch::zeros({B, 0, H, dv}, in.q.options());
  return {o, S};
}

}  // namespace

RecurrenceOutputs recurrence(const RecurrenceKind& kind, const RecurrenceInputs& in) {
  if (in.cu_seqlens.empty()) return dense(kind, in);
  if (in.q.size(0) != 1) throw std::invalid_argument("linac::oracle: cu_seqlens requires B == 1");
  std::vector<torch::Tensor> outputs, finals;
  for (size_t n = 0; n + 1 < in.cu_seqlens.size(); ++n) {
    const int64_t begin = in.cu_seqlens[n], end = in.cu_seqlens[n + 1];
    RecurrenceInputs part = in;
    part.cu_seqlens.clear();
    part.q = in.q.slice(1, begin, end);
    part.k = in.k.slice(1, begin, end);
    part.v = in.v.slice(1, begin, end);
    if (kind.decay == DecayClass::Scalar || kind.decay == DecayClass::Diagonal)
      part.g = in.g.slice(1, begin, end);
    if (in.beta.defined()) part.beta = in.beta.slice(1, begin, end);
    if (in.h0.defined()) part.h0 = in.h0.slice(0, n, n + 1);
    RecurrenceOutputs out = dense(kind, part);
    outputs.push_back(out.o);
    finals.push_back(out.ht);
  }
  return {torch::cat(outputs, 1), torch::cat(finals, 0)};
}

ScanOutputs scan(const torch::Tensor& x, const torch::Tensor& g, const torch::Tensor& h0,
                 const std::vector<int64_t>& cu_seqlens) {
  if (!cu_seqlens.empty()) {
    if (x.size(0) != 1) throw std::invalid_argument("linac::oracle: cu_seqlens requires B == 1");
    std::vector<torch::Tensor> hs, finals;
    for (size_t n = 0; n + 1 < cu_seqlens.size(); ++n) {
      const int64_t begin = cu_seqlens[n], end = cu_seqlens[n + 1];
      ScanOutputs out = scan(x.slice(1, begin, end), g.slice(1, begin, end),
                             h0.defined() ? h0.slice(0, n, n + 1) : torch::Tensor());
      hs.push_back(out.h);
      finals.push_back(out.ht);
    }
    return {torch::cat(hs, 1), torch::cat(finals, 0)};
  }
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  torch::Tensor h = h0.defined() ? h0 : torch::zeros({B, D}, x.options());
  std::vector<torch::Tensor> states;
  for (int64_t t = 0; t < T; ++t) {
    h = g.select(1, t).exp() * h + x.select(1, t);
    states.push_back(h);
  }
  torch::Tensor all = T > 0 ? torch::stack(states, 1) : torch::zeros({B, 0, D}, x.options());
  return {all, h};
}

}  // namespace linac::oracle
