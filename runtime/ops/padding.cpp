#include "padding.h"

#include <torch/torch.h>

#include <array>
#include <stdexcept>
#include <string>

namespace linac::ops {
namespace {

constexpr std::array<int64_t, 3> kCudaKeyDims = {64, 128, 256};
constexpr int64_t kCudaValueMultiple = 64;

/// t with its dim `dim` zero-padded at the end up to `size` (t itself when already that size).
torch::Tensor padDim(const torch::Tensor& t, int64_t dim, int64_t size) {
  if (!t.defined()) return t;
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  const int64_t extra = size - t.size(d);
  if (extra == 0) return t;
  // constant_pad_nd takes (before, after) pairs from the last dim backwards.
  std::vector<int64_t> pad(2 * (t.dim() - d), 0);
  pad[pad.size() - 1] = extra;
  return torch::constant_pad_nd(t, pad, 0.0);
}

}  // namespace

std::pair<int64_t, int64_t> cudaChunkDims(int64_t key_dim, int64_t value_dim) {
  int64_t dk = key_dim;
  for (int64_t supported : kCudaKeyDims)
    if (key_dim <= supported) {
      dk = supported;
      break;
    }
  const int64_t dv = (value_dim + kCudaValueMultiple - 1) / kCudaValueMultiple * kCudaValueMultiple;
  return {dk, dv};
}

std::pair<torch::Tensor, torch::Tensor> recurrencePadded(const RecurrenceInputs& in,
                                                         const RecurrenceOptions& options,
                                                         int64_t key_dim, int64_t value_dim) {
  const int64_t dk = in.q.size(-1), dv = in.v.size(-1);
  if (key_dim < dk || value_dim < dv)
    throw std::invalid_argument("recurrencePadded: cannot pad dk " + std::to_string(dk) + ", dv " +
                                std::to_string(dv) + " down to " + std::to_string(key_dim) + ", " +
                                std::to_string(value_dim));
  RecurrenceInputs padded = in;
  padded.q = padDim(in.q, -1, key_dim);  // [B, T, H, dk']
  padded.k = padDim(in.k, -1, key_dim);  // [B, T, H, dk']
  padded.v = padDim(in.v, -1, value_dim);  // [B, T, H, dv']
  if (in.g.defined() && in.g.dim() == 4) padded.g = padDim(in.g, -1, key_dim);  // diagonal [B, T, H, dk']
  padded.u = padDim(in.u, -1, key_dim);  // [H, dk']
  if (in.h0.defined()) padded.h0 = padDim(padDim(in.h0, -2, key_dim), -1, value_dim);  // [N, H, dk', dv']
  auto [o, ht] = recurrence(padded, options);
  o = o.narrow(-1, 0, dv);  // [B, T, H, dv]
  if (ht.defined()) ht = ht.narrow(-2, 0, dk).narrow(-1, 0, dv);  // [N, H, dk, dv]
  return {o, ht};
}

}  // namespace linac::ops
