#include "prologue/map_op.h"

#ifdef LINAC_HAVE_CUDA
#include "prologue/map_op_cuda.h"
#endif

#include <torch/torch.h>

#include <optional>
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

/// `map` over CPU operands with the generated host loops (operands converted to float32).
torch::Tensor applyHostMap(const runtime::PrologueMap& map, const std::vector<torch::Tensor>& operands) {
  variable_list floats;
  for (const auto& t : operands) floats.push_back(t.to(torch::kFloat32));
  return MapFunction::apply(&map, at::TensorList(floats));
}

/// The CUDA device the operands are on, or none when all are CPU tensors. Throws when they span
/// two CUDA devices or are on a device type the maps do not run on.
std::optional<torch::Device> cudaDeviceOf(const runtime::PrologueMap& map,
                                          const std::vector<torch::Tensor>& operands) {
  std::optional<torch::Device> found;
  for (size_t i = 0; i < operands.size(); ++i) {
    const torch::Device d = operands[i].device();
    if (d.is_cpu()) continue;
    if (!d.is_cuda())
      throw std::invalid_argument("prologue '" + map.role + "': operand '" + map.args[i] + "' is on " +
                                  d.str() + "; compiled prologues take CPU or CUDA tensors");
    if (found && *found != d)
      throw std::invalid_argument("prologue '" + map.role + "': operand '" + map.args[i] + "' is on " +
                                  d.str() + ", another operand on " + found->str());
    found = d;
  }
  return found;
}

}  // namespace

torch::Tensor applyMap(const runtime::PrologueMap& map, const std::vector<torch::Tensor>& operands) {
  if (operands.size() != map.args.size())
    throw std::invalid_argument("prologue '" + map.role + "' takes " + std::to_string(map.args.size()) +
                                " operands, got " + std::to_string(operands.size()));
  const std::optional<torch::Device> cuda = cudaDeviceOf(map, operands);
  if (!cuda) return applyHostMap(map, operands);
#ifdef LINAC_HAVE_CUDA
  if (const runtime::DeviceMap* device = runtime::Registry::findDevice(map)) {
    std::vector<torch::Tensor> onDevice;  // CPU operands (scalars, say) join the others
    for (const auto& t : operands) onDevice.push_back(t.to(*cuda, torch::kFloat32));
    return applyDeviceMap(map, *device, onDevice);
  }
#endif
  // No device maps for this variant (a build without CUDA, or a variant compiled on demand where
  // no GPU was visible, which builds its host side only): a round trip through the CPU. `to` is
  // differentiable, so the gradients flow back to the device.
  std::vector<torch::Tensor> onHost;
  for (const auto& t : operands) onHost.push_back(t.to(torch::kCPU));
  return applyHostMap(map, onHost).to(*cuda);
}

}  // namespace linac::prologue
