// The recurrence of a compiled variant from its raw operands, with the prologue fused into the
// chunk forward where the variant's generated code allows it (runtime::FusedPlan).
//
// q and k are in the kernel dtype (the v tile's) whether read, normalised or computed: a normalised
// or computed q / k is rounded to it, as a materialised tile would be; decay and beta are fp32.
//
// The caller passes the spec's values by name: inputs as the layer produced them (the q / k input
// of a plan with normQ / normK *not* L2-normalised), parameters, and the structural names the
// expressions read (head, layer, num_layers...), each in field layout [B|1, T|1, H|1, d|1], any
// float dtype. The op derives q, k, v, decay, beta and u from them:
//   in the kernel   CUDA tensors, fp32 or bf16 tiles, dk in {64, 128, 256}, dv a multiple of 64,
//                   and a fused forward linked in: one kernel launch reads the raw operands
//                   (generated/<variant>/<variant>_cuda.cu);
//   composed        otherwise: the prologue maps and torch's L2 norm materialise the roles, then
//                   ops::recurrence (the same values up to rounding; CPU, fp16, other head dims).
// Backward (in the kernel) recomputes the roles from the saved raw operands (maps, L2 norm), runs
// the recurrence's backward kernels, and applies the chain rule through the roles with autograd.
//
// FusedMode::Automatic runs in the kernel only when no gradient is wanted (inference, evaluation,
// generation) and q, k are tiles. Training runs composed: its backward kernels read the
// materialised roles anyway, and on the H200 materialising them once in the forward beat
// recomputing them in the backward (bench/NOTES.md: fused fwd+bwd 1-10% slower than composed).
// Computed (tied) keys run composed too: in the kernel they measured slower (HGRN2 4.10 vs 2.49 ms,
// Mamba-2 1.33 vs 1.12 ms at B=8 T=4096 H=8 D=128 bf16); FusedMode::InKernel still runs them there.
// So does every call the Hopper stages take (kernels::cuda::chunkForwardOnHopper): the fused
// forward is the mma.sync skeleton, and composed roles into the wgmma stages measured 1.9-3.3x
// faster on an H100 (DeltaNet 0.52 vs 1.71 ms, GLA 0.94 vs 1.81, RetNet 0.27 vs 0.64 at the same
// shape; bench/NOTES.md, session 25).
#pragma once

#include "registry/registry.h"

#include <torch/types.h>

#include <map>
#include <string>
#include <utility>

namespace linac::prologue {

/// The spec's values by name (see above).
using Operands = std::map<std::string, torch::Tensor>;

enum class FusedMode {
  Automatic,  // in the kernel when possible and no gradient is wanted, else composed
  InKernel,   // in the kernel whenever possible, gradients included (verify, benchmarks)
  Composed,   // always composed
};

struct FusedOptions {
  int64_t keyDim = 0;            // dk per head (required)
  double scale = 1.0;
  int64_t chunk = 64;
  bool outputFinalState = false;
  torch::Tensor h0;              // [N, H, dk, dv] fp32, or undefined
  torch::Tensor cuSeqlens;       // int64 [N + 1] (B = 1), or undefined
  FusedMode mode = FusedMode::Automatic;
};

/// A role's value reshaped to the kernels' layout (recurrence.h): q / k [B, T, H, dk],
/// v [B, T, H, dv], beta [B, T, H], u [H, dk], decay by class ([H] / [B, T, H] / [B, T, H, dk]).
/// Vector state: v and decay [B, T, H * dv].
torch::Tensor roleLayout(const std::string& role, const torch::Tensor& value, int64_t batch,
                         int64_t seqLen, int64_t heads, int64_t keyDim, int64_t valueDim,
                         const runtime::VariantKernels& variant);

/// True when fusedRecurrence runs the prologue inside the CUDA chunk kernel for `operands`.
bool runsInKernel(const runtime::VariantKernels& variant, const Operands& operands,
                  const FusedOptions& options);

/// o [B, T, H, dv] in the v tile's dtype, and ht [N, H, dk, dv] fp32 when requested (else
/// undefined). Differentiable with respect to every operand and h0. Throws std::invalid_argument
/// when the variant's plan is not available (runtime::FusedPlan::available) or an operand is
/// missing or misshapen.
std::pair<torch::Tensor, torch::Tensor> fusedRecurrence(const runtime::VariantKernels& variant,
                                                        const Operands& operands,
                                                        const FusedOptions& options);

}  // namespace linac::prologue
