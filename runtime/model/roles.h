// Shapes of a linear layer's values and the recurrence roles' layouts (DESIGN.md section 3),
// shared by the mixer layer and anything else that feeds roles to the kernels.
//
// Field shapes: a per-token value of extent head is [B, T, H, 1], key [B, T, H, dk], value
// [B, T, H, dv], scalar [B, T, 1, 1]; params are the same with B = T = 1; the structural name
// `head` is arange(H) as [1, 1, H, 1], `layer` and `num_layers` are [1, 1, 1, 1]. Expressions
// over these broadcast like the spec's extents do.
#pragma once

#include "registry/registry.h"

#include <torch/types.h>

#include <string>
#include <vector>

namespace linac::model {

/// A linear layer's sizes at model width `hidden`.
struct MixerDims {
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t keyDim = 0;    // 0 for vector state (no keys)
  int64_t valueDim = 0;  // vector state: the channels per head
};

/// Throws std::invalid_argument when a dim rule does not resolve at `hidden`.
MixerDims resolveDims(const runtime::VariantKernels& kernels, int64_t hidden);

/// Width of a per-token projection of extent `e` (all heads together).
int64_t extentWidth(runtime::Extent e, const MixerDims& d);

/// Shape of a value of extent `e` (see the header comment); B = T = 1 for params. Throws for
/// extent hidden (it has no per-head layout).
std::vector<int64_t> fieldShape(runtime::Extent e, int64_t B, int64_t T, const MixerDims& d,
                                const std::string& name);

/// Reshapes a role's value (field layout, possibly broadcast) to what the kernels take:
/// q, k [B, T, H, dk]; v [B, T, H, dv]; beta [B, T, H]; u [H, dk]; decay by class (fixed [H],
/// scalar [B, T, H], diagonal [B, T, H, dk]); vector state: v and decay [B, T, H * dv].
torch::Tensor toKernelLayout(const std::string& role, const torch::Tensor& t, int64_t B, int64_t T,
                             const MixerDims& d, const runtime::VariantKernels& kernels);

}  // namespace linac::model
