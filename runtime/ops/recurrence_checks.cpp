// Validation of the recurrence ops' arguments (header: recurrence_checks.h).
#include "recurrence_checks.h"

#include "checks.h"

#include <climits>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace linac::ops::detail {

using kernels::DecayClass;
using kernels::Readout;
using kernels::RecurrenceKind;
using kernels::UpdateRule;

void checkQkvAndGates(std::string_view op, const RecurrenceInputs& in, const RecurrenceKind& kind,
                      c10::IntArrayRef tokens) {
  using namespace checks;
  const int64_t lead = static_cast<int64_t>(tokens.size());
  const torch::Tensor& q = in.q;
  expectDim(op, "q", q, lead + 2);
  expectKernelDtype(op, "q", q);
  expectSupportedDevice(op, "q", q);
  for (int64_t d : q.sizes()) {
    if (d < 1) fail(op, "q", "non-empty dimensions", describe(q));
  }
  const int64_t heads = q.size(lead), key_dim = q.size(lead + 1);
  expectShape(op, "k", in.k, q.sizes());
  expectDim(op, "v", in.v, lead + 2);
  std::vector<int64_t> v_shape(q.sizes().begin(), q.sizes().end() - 1);
  v_shape.push_back(in.v.size(lead + 1));
  expectShape(op, "v", in.v, v_shape);
  if (in.v.size(lead + 1) < 1) fail(op, "v", "a non-empty value dimension", describe(in.v));
  for (auto [name, t] : {std::pair<const char*, const torch::Tensor*>{"k", &in.k}, {"v", &in.v}}) {
    expectDtype(op, name, *t, q.scalar_type());
    expectDevice(op, name, *t, q.device());
  }

  // g: [H] fixed, [tokens..., H] scalar, [tokens..., H, dk] diagonal.
  std::vector<int64_t> g_shape;
  switch (kind.decay) {
    case DecayClass::None:
      expectUndefined(op, "g", in.g, "decay class none");
      break;
    case DecayClass::Fixed:
      g_shape = {heads};
      break;
    case DecayClass::Scalar:
      g_shape.assign(tokens.begin(), tokens.end());
      g_shape.push_back(heads);
      break;
    case DecayClass::Diagonal:
      g_shape.assign(tokens.begin(), tokens.end());
      g_shape.insert(g_shape.end(), {heads, key_dim});
      break;
  }
  if (kind.decay != DecayClass::None) {
    if (!in.g.defined() || in.g.sizes() != c10::IntArrayRef(g_shape)) {
      fail(op, "g",
           "shape " + shapeString(g_shape) + " for decay class " +
               std::string(decayName(kind.decay)),
           describe(in.g));
    }
    expectFloating(op, "g", in.g);
    expectDevice(op, "g", in.g, q.device());
  }

  if (kind.update == UpdateRule::Delta) {
    std::vector<int64_t> beta_shape(tokens.begin(), tokens.end());
    beta_shape.push_back(heads);
    if (!in.beta.defined() || in.beta.sizes() != c10::IntArrayRef(beta_shape)) {
      fail(op, "beta", "shape " + shapeString(beta_shape) + " for the delta rule",
           describe(in.beta));
    }
    expectFloating(op, "beta", in.beta);
    expectDevice(op, "beta", in.beta, q.device());
  } else {
    expectUndefined(op, "beta", in.beta, "the additive update");
  }

  if (kind.readout == Readout::ExclusiveBonus) {
    if (!in.u.defined() || in.u.sizes() != c10::IntArrayRef({heads, key_dim})) {
      fail(op, "u", "shape " + shapeString({heads, key_dim}) + " for the exclusive_bonus readout",
           describe(in.u));
    }
    expectFloating(op, "u", in.u);
    expectDevice(op, "u", in.u, q.device());
  } else {
    expectUndefined(op, "u", in.u, "the inclusive readout");
  }
}

RecurrenceKind checkedKind(std::string_view op, const RecurrenceKind& kind) {
  const int decay = static_cast<int>(kind.decay), update = static_cast<int>(kind.update),
            readout = static_cast<int>(kind.readout);
  if (decay < 0 || decay > 3 || update < 0 || update > 1 || readout < 0 || readout > 1) {
    checks::fail(op, "options.kind", "a valid decay class / update rule / readout",
                 "enum values " + std::to_string(decay) + " / " + std::to_string(update) + " / " +
                     std::to_string(readout));
  }
  return kind;
}

void checkScale(std::string_view op, double scale) {
  if (!std::isfinite(scale))
    checks::fail(op, "options.scale", "a finite value", std::to_string(scale));
}

RecurrenceDims checkRecurrence(const RecurrenceInputs& in, const RecurrenceOptions& options) {
  using namespace checks;
  constexpr std::string_view op = kRecurrenceOp;
  const RecurrenceKind kind = checkedKind(op, options.kind);
  checkScale(op, options.scale);
  if (options.chunk < 1 || options.chunk > INT_MAX) {
    fail(op, "options.chunk", "a positive chunk length", std::to_string(options.chunk));
  }
  expectDim(op, "q", in.q, 4);
  const int64_t batch = in.q.size(0), seq_len = in.q.size(1);
  checkQkvAndGates(op, in, kind, {batch, seq_len});

  RecurrenceDims dims{batch, seq_len, in.q.size(2), in.q.size(3), in.v.size(3), batch, {}};
  dims.cu_seqlens_host = checkCuSeqlens(op, in.cu_seqlens, batch, seq_len, in.q.device());
  if (dims.cu_seqlens_host.defined()) dims.num_seqs = dims.cu_seqlens_host.numel() - 1;
  if (in.h0.defined()) {
    expectShape(op, "h0", in.h0, {dims.num_seqs, dims.heads, dims.key_dim, dims.value_dim});
    expectDtype(op, "h0", in.h0, torch::kFloat);
    expectDevice(op, "h0", in.h0, in.q.device());
  }
  return dims;
}

}  // namespace linac::ops::detail
