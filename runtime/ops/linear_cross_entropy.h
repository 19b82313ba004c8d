// The mean cross-entropy of a linear layer's logits without the whole [N, V] logits (fla's fused
// linear cross-entropy): the tokens are taken in chunks sized by a memory budget, and each chunk's
// logits give the loss and, in the same pass, their gradient, folded at once into the gradients
// of the hidden states and of the weight. Autograd's backward then only scales the stored
// gradients by the incoming one. The LM head and its loss are one op: at a 32,000-entry vocabulary
// the logits, their log-softmax and their gradient are otherwise three [N, V] fp32 tensors.
//
// Plain ATen ops per chunk, so it runs on any device torch does (CPU and CUDA here). Inputs in
// fp32, bf16 or fp16; the logits, the softmax, the loss and the weight's gradient are fp32 whatever
// the input dtype. On CUDA the chunk's GEMMs read the input dtype with fp32 accumulation (the
// weight's gradient through an fp32-output GEMM); the CPU has no such GEMM, so there a chunk of
// low-precision inputs is upcast to fp32 for its GEMMs.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace linac::ops {

/// torch's cross_entropy ignore_index: a target equal to it takes no loss and gives no gradient.
constexpr int64_t kDefaultIgnoreIndex = -100;
/// Working memory of one chunk (its fp32 logits, turned in place into their gradient, and the
/// gradient's copy in the GEMM dtype): 256 MiB, 1,048 tokens a chunk at a 32,000-entry vocabulary.
constexpr int64_t kDefaultLossChunkBytes = int64_t{256} << 20;

struct LinearCrossEntropyOptions {
  int64_t ignoreIndex = kDefaultIgnoreIndex;
  int64_t chunkBytes = kDefaultLossChunkBytes;  // at least one token a chunk whatever the budget
};

/// mean over the tokens whose target is not ignoreIndex of cross_entropy(hidden @ weight^T,
/// targets), as torch's cross_entropy(logits.float(), targets) computes it (NaN when every target
/// is ignored). hidden [N, d] and weight [V, d]: same dtype (fp32 / bf16 / fp16), same device;
/// targets [N] int64 in [0, V) or ignoreIndex. Returns a 0-d fp32 tensor, differentiable with
/// respect to hidden and weight (gradients in their dtypes; only those wanted are computed). Never
/// reads a value back to the host. On CUDA the GEMMs run in the inputs' dtype, or in autocast's when
/// CUDA autocast is on (as the logits path's torch::linear would); softmax and sums stay fp32.
/// Bad arguments throw std::invalid_argument naming the argument.
torch::Tensor linearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                 const torch::Tensor& targets, const LinearCrossEntropyOptions& options = {});

/// Tokens per chunk for a vocabulary of `vocab` entries under a budget of `chunkBytes` (>= 1).
int64_t lossChunkTokens(int64_t vocab, int64_t chunkBytes);

}  // namespace linac::ops
