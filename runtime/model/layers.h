// Building blocks shared by the mixers and the LM (DESIGN.md section 5): parameter plans (one
// list of shapes and initialisers per layer, used both to allocate the parameters and to count
// them without allocating), RMSNorm, RoPE, the SwiGLU MLP, the short causal conv, L2 norm.
#pragma once

#include "linac/Spec/Spec.h"
#include "registry/layer.h"

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace linac::model {

/// fla's norm_eps and initializer_range.
constexpr double kNormEps = 1e-6;
constexpr double kInitStd = 0.02;

/// How a parameter starts. Projections, convs and embeddings follow fla's _init_weights
/// (normal, std 0.02; biases zero); norm weights are ones; a layer's params use their own init
/// (runtime::ParamDescription).
struct ParamInit {
  enum class Kind { Normal, Zeros, Ones, Uniform, Param };
  Kind kind = Kind::Normal;
  double a = kInitStd, b = 0.0;  // Normal: std a; Uniform: [a, b)
  runtime::ParamDescription param;  // Kind::Param

  static ParamInit normal(double std = kInitStd) { return make(Kind::Normal, std, 0.0); }
  static ParamInit zeros() { return make(Kind::Zeros, 0.0, 0.0); }
  static ParamInit ones() { return make(Kind::Ones, 0.0, 0.0); }
  static ParamInit uniform(double a, double b) { return make(Kind::Uniform, a, b); }
  static ParamInit fromParam(const runtime::ParamDescription& p) {
    ParamInit i = make(Kind::Param, 0.0, 0.0);
    i.param = p;
    return i;
  }

private:
  static ParamInit make(Kind k, double a, double b) {
    ParamInit i;
    i.kind = k, i.a = a, i.b = b;
    return i;
  }
};

/// One parameter of a layer: its name (no dots: torch module parameter names), shape and init.
struct ParamPlan {
  std::string name;
  std::vector<int64_t> shape;
  ParamInit init;
};
using Plan = std::vector<ParamPlan>;

int64_t planCount(const Plan& plan);
/// A float32 CPU tensor drawn per `init`.
torch::Tensor initTensor(const ParamInit& init, const std::vector<int64_t>& shape);
/// Registers every parameter of `plan` on `module`; `out` maps plan names to the parameters.
void registerPlan(torch::nn::Module& module, const Plan& plan,
                  std::map<std::string, torch::Tensor>& out);

/// fla's default SwiGLU width: hidden * 4 * 2/3, truncated, rounded up to a multiple of 256
/// (or preset.intermediate when given).
int64_t intermediateSize(const spec::PresetSpec& preset);

/// x [..., D] * rsqrt(mean(x^2) + eps) * weight [D] through ATen's rms_norm (on CUDA its fused
/// kernel, forward and backward), accumulated in fp32. The result has x's dtype, except under
/// autocast for x's device where a bf16 / fp16 x is normalised in fp32 and gives fp32 (what
/// autocast made of the composed formula the model used before). weight is cast to the dtype
/// computed in.
torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps = kNormEps);

/// Rotary position embedding (fla's RotaryEmbedding, non-interleaved: rotate halves) on
/// x [B, T, H, D] at positions offset..offset+T-1. D must be even.
torch::Tensor rope(const torch::Tensor& x, double theta, int64_t offset = 0);
/// rope at explicit positions [B, T] (int64): packed documents count from their own start
/// (model/documents.h).
torch::Tensor ropeAt(const torch::Tensor& x, double theta, const torch::Tensor& positions);

/// Casts q, k, v to the one element type the recurrence kernels run them in: the reduced
/// precision (bf16 / fp16) when any of them has it, else unchanged. Under CUDA autocast the
/// projections come out bf16 while L2-normalised q / k are promoted to fp32 (pow, sum, rsqrt run
/// in fp32 there).
void toCommonKernelDtype(torch::Tensor& q, torch::Tensor& k, torch::Tensor& v);

/// x in autocast's dtype when autocast is on for x's device and x is fp32, else x itself. A
/// block's normalised input feeds several projections (q, k, v, gates; the MLP's gate and up):
/// autocast would cast it once for each and, in the backward, convert each of their gradients
/// back to fp32 and sum them there. Cast once here, the projections read one copy and their
/// gradients sum in that dtype before a single conversion.
torch::Tensor autocastInput(const torch::Tensor& x);

/// A block's normalised input, rmsNorm(x, weight) in the dtype its projections read
/// (autocastInput's): one fused kernel on CUDA where ops::rmsNormSupported says so, rmsNorm +
/// autocastInput elsewhere.
torch::Tensor blockNorm(const torch::Tensor& x, const torch::Tensor& weight);

/// A linear mixer's output norm times its gate, rmsNorm(o, weight) * gate: one fused kernel each way
/// on CUDA (ops::rmsNormGated, y in the dtype the output projection reads), composed elsewhere.
torch::Tensor gatedRmsNorm(const torch::Tensor& o, const torch::Tensor& weight, const torch::Tensor& gate);

/// {h, blockNorm(h, weight)} with h = x + residual (the residual stream after a mixer or MLP): one
/// fused kernel each way on CUDA (ops::addRmsNorm), the add and blockNorm elsewhere.
std::pair<torch::Tensor, torch::Tensor> addBlockNorm(const torch::Tensor& x, const torch::Tensor& residual,
                                                     const torch::Tensor& weight);

/// x * rsqrt(sum(x^2) + eps) over the last dim (fla's l2norm): ops::l2Normalize's one kernel each
/// way for CUDA tensors (in x's dtype, computed in fp32), composed torch ops elsewhere.
torch::Tensor l2Normalize(const torch::Tensor& x, double eps = kNormEps);

/// Short causal depthwise conv (fla's ShortConvolution without bias): x [B, T, C], weight
/// [C, 1, W]; out_t depends on x_{t-W+1..t} only.
torch::Tensor causalConv(const torch::Tensor& x, const torch::Tensor& weight);

torch::Tensor activate(const torch::Tensor& x, runtime::Activation a);

/// activate(causalConv(x, weight), a): on CUDA one fused kernel, forward and backward
/// (ops::shortConv: sums in fp32, weight used in fp32, x's dtype out); elsewhere the two composed.
torch::Tensor causalConvActivated(const torch::Tensor& x, const torch::Tensor& weight, runtime::Activation a);

/// causalConvActivated within packed documents: out_t reads x_{t-j} only for j <= positions_t,
/// the token's offset in its document ([B, T] int64, model/documents.h). On CUDA the fused kernel
/// (ops::shortConv with positions); elsewhere composed torch ops, summed in fp32, x's dtype out.
torch::Tensor causalConvActivatedWithin(const torch::Tensor& x, const torch::Tensor& weight, runtime::Activation a,
                                        const torch::Tensor& positions);

/// SwiGLU MLP parameters (fla's GatedMLP: gate_proj, up_proj, down_proj, no biases).
Plan swigluPlan(int64_t hidden, int64_t intermediate, const std::string& prefix);
/// down(silu(gate(x)) * up(x)) with the parameters of swigluPlan(prefix); the product is one fused
/// kernel on CUDA (ops::swigluProduct).
torch::Tensor swiglu(const torch::Tensor& x, const std::map<std::string, torch::Tensor>& params,
                     const std::string& prefix);

}  // namespace linac::model
