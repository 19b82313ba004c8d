#include "ops/linear_cross_entropy.h"

#include "ops/checks.h"

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <ATen/ops/addmm.h>

#include <algorithm>
#include <utility>

#ifdef LINAC_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "ops/cuda_stream.h"
#endif

namespace linac::ops {
namespace {

constexpr std::string_view kOp = "linac::ops::linearCrossEntropy";
/// Bytes a chunk holds per logit at most: the fp32 logits (4) plus, for bf16 / fp16 GEMMs, the
/// GEMM's output before its fp32 copy or the gradient's copy for the gradient GEMMs (2 + 2).
constexpr int64_t kBytesPerChunkLogit = 2 * int64_t(sizeof(float));

struct LossAndGradients {
  torch::Tensor loss;        // [] fp32
  torch::Tensor gradHidden;  // [N, d] hidden's dtype, for a loss of 1; undefined unless wanted
  torch::Tensor gradWeight;  // [V, d] weight's dtype, for a loss of 1; undefined unless wanted
};

// The weight's gradient accumulated in fp32 over the chunks: gradWeight [V, d] fp32 +=
// grad^T [V, c] @ x [c, d], both in `gemm` dtype (an fp32-output GEMM for bf16 / fp16 on CUDA).
void accumulateWeightGradient(torch::Tensor& gradWeight, const torch::Tensor& gradLogits, const torch::Tensor& x) {
  if (x.scalar_type() == torch::kFloat32)
    gradWeight.addmm_(gradLogits.t(), x);
  else
    at::addmm_out(gradWeight, gradWeight, gradLogits.t(), x, torch::kFloat32);
}

/// One chunk's summed loss and, when `wantGrad`, d loss / d logits = (softmax - onehot(target)) *
/// perToken on scored rows, 0 elsewhere, in the logits' dtype. logits [c, V] in the GEMM's dtype;
/// target [c] with the ignore index where a token is not scored. On CUDA (fp32 / bf16 / fp16
/// logits) one kernel (kernels/cuda/cross_entropy.cu) writes the gradient over the logits;
/// elsewhere ATen ops in fp32.
std::pair<torch::Tensor, torch::Tensor> chunkLossAndGradient(torch::Tensor logits, const torch::Tensor& target,
                                                             const torch::Tensor& perToken, int64_t ignoreIndex,
                                                             bool wantGrad) {
  const int64_t rows = logits.size(0);
  const torch::TensorOptions fp32 = logits.options().dtype(torch::kFloat32);
#ifdef LINAC_HAVE_CUDA
  const auto type = logits.scalar_type();
  if (logits.is_cuda() && checks::isKernelDtype(type)) {
    const int64_t vocab = logits.size(1);
    logits = logits.contiguous();
    const torch::Tensor targets = target.contiguous(), scale = perToken.contiguous();
    torch::Tensor rowLoss = torch::empty({rows}, fp32);
    kernels::cuda::CrossEntropyArgs args;
    args.logits = logits.data_ptr(), args.targets = targets.data_ptr<int64_t>(), args.ignoreIndex = ignoreIndex;
    args.scale = scale.data_ptr<float>(), args.loss = rowLoss.data_ptr<float>();
    args.grad = wantGrad ? logits.data_ptr() : nullptr;  // in place
    kernels::cuda::crossEntropyForwardBackward(checks::kernelDtype(type), {rows, vocab}, args,
                                               currentStream(logits.device()));
    return {rowLoss.sum(), wantGrad ? logits : torch::Tensor()};
  }
#endif
  const torch::Tensor keep = target.ne(ignoreIndex);                                        // [c] bool
  const torch::Tensor index = target.masked_fill(keep.logical_not(), 0).unsqueeze(1);  // [c, 1], 0 where ignored
  const torch::ScalarType gemmDtype = logits.scalar_type();
  torch::Tensor l = logits.to(torch::kFloat32);  // [c, V] fp32
  // log-sum-exp without a second [c, V] buffer: shift by the row maximum and exponentiate in place.
  const torch::Tensor picked = l.gather(1, index).squeeze(1);                // [c] the target's logit
  const torch::Tensor rowMax = std::get<0>(l.max(1, /*keepdim=*/true));     // [c, 1]
  torch::Tensor expShifted = l.sub_(rowMax).exp_();                          // [c, V], in place
  const torch::Tensor sumExp = expShifted.sum(1, /*keepdim=*/true);          // [c, 1]
  const torch::Tensor logSumExp = (rowMax + sumExp.log()).squeeze(1);        // [c]
  const torch::Tensor loss = ((logSumExp - picked) * keep).sum();
  if (!wantGrad) return {loss, torch::Tensor()};
  torch::Tensor grad = expShifted.div_(sumExp);  // [c, V] the softmax, in place
  grad.scatter_add_(1, index, torch::full({rows, 1}, -1.0f, fp32));
  grad.mul_((keep.to(torch::kFloat32) * perToken).unsqueeze(1));
  return {loss, grad.to(gemmDtype)};  // grad itself when fp32
}

LossAndGradients lossAndGradients(const torch::Tensor& hidden, const torch::Tensor& weight,
                                  const torch::Tensor& targets, const LinearCrossEntropyOptions& options,
                                  torch::ScalarType deviceGemmDtype, bool wantHidden, bool wantWeight) {
  const int64_t tokens = hidden.size(0), vocab = weight.size(0);
  // Mixed-precision GEMMs (fp32 accumulation, fp32 output for the weight's gradient) on CUDA;
  // the CPU has no fp32-output GEMM for bf16 / fp16, so there the chunks' GEMMs run in fp32.
  const torch::ScalarType gemmDtype = hidden.is_cuda() ? deviceGemmDtype : torch::kFloat32;
  const torch::Tensor w = weight.to(gemmDtype);                                  // [V, d]
  const torch::Tensor scored = targets.ne(options.ignoreIndex);                  // [N] bool
  const torch::Tensor perToken = scored.sum().to(torch::kFloat32).reciprocal();  // [] 1 / scored tokens
  const torch::TensorOptions fp32 = hidden.options().dtype(torch::kFloat32);
  torch::Tensor lossSum = torch::zeros({}, fp32);
  torch::Tensor gradHidden = wantHidden ? torch::empty_like(hidden) : torch::Tensor();                  // [N, d]
  torch::Tensor gradWeight = wantWeight ? torch::zeros({vocab, weight.size(1)}, fp32) : torch::Tensor();  // [V, d]

  const int64_t chunk = lossChunkTokens(vocab, options.chunkBytes);
  for (int64_t begin = 0; begin < tokens; begin += chunk) {
    const int64_t end = std::min(tokens, begin + chunk);
    const torch::Tensor x = hidden.slice(0, begin, end).to(gemmDtype);  // [c, d]
    auto [loss, gradGemm] = chunkLossAndGradient(x.mm(w.t()), targets.slice(0, begin, end), perToken,
                                                 options.ignoreIndex, wantHidden || wantWeight);  // [c, V]
    lossSum += loss;
    if (!wantHidden && !wantWeight)
      continue;
    if (wantHidden)
      gradHidden.slice(0, begin, end).copy_(gradGemm.mm(w));  // [c, d]
    if (wantWeight)
      accumulateWeightGradient(gradWeight, gradGemm, x);
  }
  return {lossSum * perToken, gradHidden, wantWeight ? gradWeight.to(weight.scalar_type()) : torch::Tensor()};
}

struct LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& targets, int64_t ignoreIndex,
                               int64_t chunkBytes, int64_t gemmDtype, bool wantHidden, bool wantWeight) {
    // The dtypes are chosen here (fp32 softmax and accumulation): autocast must not recast the GEMMs.
    c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::autocast_dispatch_keyset);
    LossAndGradients pass = lossAndGradients(hidden, weight, targets, {ignoreIndex, chunkBytes},
                                             static_cast<torch::ScalarType>(gemmDtype), wantHidden, wantWeight);
    if (pass.gradHidden.defined())
      ctx->saved_data["grad_hidden"] = pass.gradHidden;
    if (pass.gradWeight.defined())
      ctx->saved_data["grad_weight"] = pass.gradWeight;
    return pass.loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOutputs) {
    const torch::Tensor& gradLoss = gradOutputs[0];  // []
    auto scaled = [&](const char* name) {
      auto saved = ctx->saved_data.find(name);
      if (saved == ctx->saved_data.end())
        return torch::Tensor();
      const torch::Tensor g = saved->second.toTensor();
      return g * gradLoss.to(g.scalar_type());
    };
    return {scaled("grad_hidden"), scaled("grad_weight"), {}, {}, {}, {}, {}, {}};
  }
};

}  // namespace

int64_t lossChunkTokens(int64_t vocab, int64_t chunkBytes) {
  return std::max<int64_t>(1, chunkBytes / (std::max<int64_t>(1, vocab) * kBytesPerChunkLogit));
}

torch::Tensor linearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                 const torch::Tensor& targets, const LinearCrossEntropyOptions& options) {
  checks::expectDefined(kOp, "hidden", hidden);
  checks::expectDefined(kOp, "weight", weight);
  checks::expectDefined(kOp, "targets", targets);
  checks::expectDim(kOp, "hidden", hidden, 2);
  checks::expectKernelDtype(kOp, "hidden", hidden);
  checks::expectDim(kOp, "weight", weight, 2);
  checks::expectShape(kOp, "weight", weight, {weight.size(0), hidden.size(1)});
  checks::expectDtype(kOp, "weight", weight, hidden.scalar_type());
  checks::expectDevice(kOp, "weight", weight, hidden.device());
  checks::expectShape(kOp, "targets", targets, {hidden.size(0)});
  checks::expectDtype(kOp, "targets", targets, torch::kInt64);
  checks::expectDevice(kOp, "targets", targets, hidden.device());
  if (options.chunkBytes < 1)
    checks::fail(kOp, "options.chunkBytes", "a positive memory budget", std::to_string(options.chunkBytes));
  // Under CUDA autocast the GEMMs take autocast's dtype, as torch::linear on the logits path would
  // (an fp32 hidden state would otherwise run the LM head's GEMMs in fp32).
  torch::ScalarType gemmDtype = hidden.scalar_type();
  if (hidden.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA))
    gemmDtype = at::autocast::get_autocast_dtype(at::kCUDA);
  const bool grad = torch::GradMode::is_enabled();
  return LinearCrossEntropyFunction::apply(hidden, weight, targets, options.ignoreIndex, options.chunkBytes,
                                           static_cast<int64_t>(gemmDtype), grad && hidden.requires_grad(),
                                           grad && weight.requires_grad());
}

}  // namespace linac::ops
