// Writes one linear layer of linac's runtime (runtime/model/linear_layer.cpp) to a safetensors
// file: its parameters under their names, an input x [2, 45, hidden] and the layer's output y
// (float32, CPU, the Kernels backend), so that wheel_test.py can build linac.nn.LinearAttention
// with the same parameters and compare. Every variant of generated/ that the build links.
//
// usage: linac_layer_dump VARIANT HIDDEN OUT.safetensors
#include "interop/safetensors.h"
#include "model/linear_layer.h"
#include "registry/registry.h"

#include <torch/torch.h>

#include <iostream>
#include <map>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: linac_layer_dump VARIANT HIDDEN OUT.safetensors\n";
    return 2;
  }
  try {
    const linac::runtime::VariantKernels* kernels = linac::runtime::Registry::find(argv[1]);
    if (!kernels) throw std::invalid_argument(std::string("no variant '") + argv[1] + "' in this build");
    const int64_t hidden = std::stoll(argv[2]);
    // Layer 1 of 3: the `layer` and `num_layers` indices (HGRN's bounds) are not trivial.
    const int64_t layerIndex = 1, numLayers = 3;
    torch::manual_seed(0);
    linac::model::LinearMixerImpl layer(*kernels, hidden, layerIndex, numLayers, linac::model::MixerBackend::Kernels);
    std::map<std::string, torch::Tensor> tensors;
    for (const auto& p : layer.named_parameters()) {
      // Zero-initialised biases and norms would hide a wrong use: every parameter is perturbed.
      torch::NoGradGuard noGrad;
      p.value().add_(0.1 * torch::randn_like(p.value()));
      tensors[p.key()] = p.value().detach().clone();
    }
    const torch::Tensor x = torch::randn({2, 45, hidden});  // [B, T, hidden]
    torch::Tensor y;
    {
      torch::NoGradGuard noGrad;
      y = layer.forward(x);
    }
    tensors["x"] = x;
    tensors["y"] = y;
    linac::interop::writeSafetensors(argv[3], tensors,
                                     {{"variant", argv[1]}, {"layer_idx", std::to_string(layerIndex)},
                                      {"num_layers", std::to_string(numLayers)}});
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "linac_layer_dump: " << e.what() << "\n";
    return 1;
  }
}
