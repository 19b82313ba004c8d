#include "prologue/strided_layout.h"

#include <torch/torch.h>

#include <optional>
#include <stdexcept>

namespace linac::prologue {
namespace {

using runtime::kDeviceMapRank;

/// stridedLayout without the copying fallback: empty when more than kDeviceMapRank dims remain.
std::optional<StridedLayout> collapse(at::IntArrayRef sizes, const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> expanded;  // broadcast dims get stride 0
  for (const auto& t : tensors) expanded.push_back(t.expand(sizes));
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides(tensors.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    // Outer dim (size S, stride s) and this one (size n, stride t) index as one dim of size S * n
    // when s == t * n for every tensor.
    bool merge = !dims.empty();
    for (size_t j = 0; j < expanded.size() && merge; ++j)
      merge = strides[j].back() == expanded[j].stride(int64_t(d)) * sizes[d];
    if (merge) {
      dims.back() *= sizes[d];
      for (size_t j = 0; j < expanded.size(); ++j) strides[j].back() = expanded[j].stride(int64_t(d));
    } else {
      dims.push_back(sizes[d]);
      for (size_t j = 0; j < expanded.size(); ++j) strides[j].push_back(expanded[j].stride(int64_t(d)));
    }
  }
  if (dims.size() > size_t(kDeviceMapRank)) return std::nullopt;
  const size_t pad = kDeviceMapRank - dims.size();
  StridedLayout layout;
  for (size_t d = 0; d < dims.size(); ++d) layout.shape.sizes[pad + d] = dims[d];
  for (size_t j = 0; j < tensors.size(); ++j) {
    runtime::StridedOperand operand;
    operand.data = tensors[j].data_ptr<float>();
    for (size_t d = 0; d < dims.size(); ++d) operand.strides[pad + d] = strides[j][d];
    layout.operands.push_back(operand);
  }
  return layout;
}

}  // namespace

std::vector<int64_t> broadcastSizes(at::TensorList tensors) {
  std::vector<int64_t> sizes;
  for (const auto& t : tensors) sizes = at::infer_size(sizes, t.sizes());
  return sizes;
}

StridedLayout stridedLayout(at::IntArrayRef sizes, const std::vector<torch::Tensor>& tensors,
                            std::vector<torch::Tensor>& keepAlive) {
  if (auto layout = collapse(sizes, tensors)) return *layout;
  keepAlive.clear();
  for (const auto& t : tensors) keepAlive.push_back(t.expand(sizes).contiguous());
  if (auto layout = collapse(sizes, keepAlive)) return *layout;
  throw std::logic_error("prologue: contiguous operands of shape " + c10::str(sizes) +
                         " did not collapse to one dim");
}

}  // namespace linac::prologue
