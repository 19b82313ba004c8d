#include "prologue/map_op.h"

#include <torch/torch.h>

#include <stdexcept>

namespace linac::prologue {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Pointers to the rows of expanded operands, as the generated wrappers take them.
std::vector<const float*> dataPointers(const std::vector<torch::Tensor>& tensors) {
  std::vector<const float*> ptrs;
  for (const auto& t : tensors) ptrs.push_back(t.data_ptr<float>());
  return ptrs;
}

std::vector<torch::Tensor> broadcastContiguous(const variable_list& operands) {
  std::vector<torch::Tensor> out;
  for (const auto& t : torch::broadcast_tensors(operands)) out.push_back(t.contiguous());
  return out;
}

class MapFunction : public torch::autograd::Function<MapFunction> {
public:
  // Operands come as a TensorList: that is the argument type autograd tracks element-wise
  // (a std::vector<Tensor> would be taken as an opaque non-tensor argument).
  static torch::Tensor forward(AutogradContext* ctx, const runtime::PrologueMap* map,
                               at::TensorList operands) {
    ctx->saved_data["map"] = reinterpret_cast<int64_t>(map);
    ctx->save_for_backward(operands.vec());
    auto expanded = broadcastContiguous(operands.vec());
    torch::Tensor out = torch::empty(expanded.at(0).sizes(), expanded.at(0).options());
    map->forward(dataPointers(expanded).data(), out.data_ptr<float>(), out.numel());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    auto* map = reinterpret_cast<const runtime::PrologueMap*>(ctx->saved_data["map"].toInt());
    if (!map->partials)
      throw std::runtime_error("prologue '" + map->role +
                               "' has no compiled derivative (linac-differentiate derived none)");
    variable_list operands = ctx->get_saved_variables();
    auto expanded = broadcastContiguous(operands);
    std::vector<torch::Tensor> partials;
    std::vector<float*> partialPtrs;
    for (const auto& e : expanded) {
      partials.push_back(torch::empty(e.sizes(), e.options()));
      partialPtrs.push_back(partials.back().data_ptr<float>());
    }
    map->partials(dataPointers(expanded).data(), partialPtrs.data(), expanded.at(0).numel());
    torch::Tensor grad = gradOutputs.at(0);
    variable_list grads = {torch::Tensor()};  // the map pointer
    for (size_t i = 0; i < operands.size(); ++i)
      grads.push_back((grad * partials[i]).sum_to_size(operands[i].sizes()));
    return grads;
  }
};

}  // namespace

torch::Tensor applyMap(const runtime::PrologueMap& map, const std::vector<torch::Tensor>& operands) {
  if (operands.size() != map.args.size())
    throw std::invalid_argument("prologue '" + map.role + "' takes " + std::to_string(map.args.size()) +
                                " operands, got " + std::to_string(operands.size()));
  variable_list floats;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].device().is_cpu())
      throw std::invalid_argument("prologue '" + map.role + "': operand '" + map.args[i] +
                                  "' must be a CPU tensor (compiled prologues run on the CPU here)");
    floats.push_back(operands[i].to(torch::kFloat32));
  }
  return MapFunction::apply(&map, at::TensorList(floats));
}

}  // namespace linac::prologue
