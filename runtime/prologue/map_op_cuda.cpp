#include "prologue/map_op_cuda.h"

#include "ops/cuda_stream.h"
#include "prologue/strided_layout.h"

#include <c10/cuda/CUDAGuard.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace linac::prologue {
namespace {

using ops::currentStream;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class DeviceMapFunction : public torch::autograd::Function<DeviceMapFunction> {
public:
  // Operands come as a TensorList so autograd tracks each (see MapFunction in map_op.cpp).
  static torch::Tensor forward(AutogradContext* ctx, const runtime::PrologueMap* map,
                               const runtime::DeviceMap* device, at::TensorList operands) {
    ctx->saved_data["map"] = reinterpret_cast<int64_t>(map);
    ctx->saved_data["device"] = reinterpret_cast<int64_t>(device);
    ctx->save_for_backward(operands.vec());
    const std::vector<int64_t> sizes = broadcastSizes(operands);
    const torch::Device where = operands.at(0).device();
    torch::Tensor out = torch::empty(sizes, torch::dtype(torch::kFloat32).device(where));
    if (out.numel() == 0) return out;
    const c10::cuda::CUDAGuard guard(where);
    std::vector<torch::Tensor> keepAlive;
    const StridedLayout layout = stridedLayout(sizes, operands.vec(), keepAlive);
    device->forward(layout.operands.data(), out.data_ptr<float>(), layout.shape, currentStream(where));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    auto* map = reinterpret_cast<const runtime::PrologueMap*>(ctx->saved_data["map"].toInt());
    auto* device = reinterpret_cast<const runtime::DeviceMap*>(ctx->saved_data["device"].toInt());
    if (!device->partials)
      throw std::runtime_error("prologue '" + map->role +
                               "' has no compiled derivative (linac-differentiate derived none)");
    const variable_list operands = ctx->get_saved_variables();
    const std::vector<int64_t> sizes = broadcastSizes(operands);
    const torch::Device where = operands.at(0).device();
    const torch::Tensor grad = gradOutputs.at(0).to(where, torch::kFloat32);

    // grad * partial at the result's shape for each operand that needs a gradient (needs_input_grad
    // counts tensor arguments only), then summed down to the operand's shape.
    std::vector<torch::Tensor> full(operands.size());
    std::vector<float*> fullData(operands.size(), nullptr);
    for (size_t i = 0; i < operands.size(); ++i) {
      if (!ctx->needs_input_grad(i)) continue;
      full[i] = torch::empty(sizes, torch::dtype(torch::kFloat32).device(where));
      fullData[i] = full[i].data_ptr<float>();
    }
    const int64_t count = c10::multiply_integers(sizes);
    if (count != 0) {
      const c10::cuda::CUDAGuard guard(where);
      std::vector<torch::Tensor> tensors(operands.begin(), operands.end()), keepAlive;
      tensors.push_back(grad);
      const StridedLayout layout = stridedLayout(sizes, tensors, keepAlive);
      device->partials(layout.operands.data(), layout.operands.back(), fullData.data(), layout.shape,
                       currentStream(where));
    }
    variable_list grads = {torch::Tensor(), torch::Tensor()};  // the map and device pointers
    for (size_t i = 0; i < operands.size(); ++i)
      grads.push_back(full[i].defined() ? full[i].sum_to_size(operands[i].sizes()) : torch::Tensor());
    return grads;
  }
};

}  // namespace

torch::Tensor applyDeviceMap(const runtime::PrologueMap& map, const runtime::DeviceMap& device,
                             const std::vector<torch::Tensor>& operands) {
  if (operands.empty())
    throw std::invalid_argument("prologue '" + map.role + "': the device map needs at least one operand");
  for (size_t i = 0; i < operands.size(); ++i)
    if (!operands[i].is_cuda() || operands[i].scalar_type() != torch::kFloat32 ||
        operands[i].device() != operands[0].device())
      throw std::invalid_argument("prologue '" + map.role + "': operand '" + map.args.at(i) + "' is " +
                                  c10::toString(operands[i].scalar_type()) + " on " +
                                  operands[i].device().str() + ", expected float32 on " +
                                  operands[0].device().str());
  return DeviceMapFunction::apply(&map, &device, at::TensorList(operands));
}

void launchFusedForward(runtime::FusedForwardFn forward, const kernels::FusedForwardArgs& args,
                        const torch::Device& device) {
  if (!forward) throw std::invalid_argument("launchFusedForward: no fused forward is linked in");
  const c10::cuda::CUDAGuard guard(device);
  forward(args, currentStream(device));
}

}  // namespace linac::prologue
