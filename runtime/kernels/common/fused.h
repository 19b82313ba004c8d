// The chunk forward with the prologue computed inside the kernel: what the generated code of a
// variant (generated/<variant>/<variant>_cuda.cu) and the torch op (runtime/prologue/
// fused_recurrence.h) exchange. Plain C++, no CUDA and no torch.
//
// Instead of materialised q, k, g and beta, the kernel receives the spec's raw operands (inputs,
// parameters, structural names such as `head`) and evaluates the spec's expressions while it
// loads a chunk:
//   q, k   a tile read from a [B, T, H, dk] tensor (a plain reference to an input), optionally
//          L2-normalised per row in the kernel, or computed per element from operands (tied keys
//          such as HGRN2's k = 1 - f, Mamba-2's k = dt * B);
//   v      always a tile;
//   decay  computed from operands per element (diagonal), per token (scalar) or per head (fixed);
//   beta   computed from operands per token.
#pragma once

#include "recurrence.h"

#include <cstdint>

namespace linac::kernels {

/// Rank of the index space roles are evaluated over: (batch, token, head, channel).
inline constexpr int kFusedRank = 4;
/// Most operands one fused role reads; a spec needing more is not fused (the emitter says so).
inline constexpr int kMaxRoleOperands = 4;

/// One raw operand in device memory, in its own float dtype. Element (b, t, h, c) of the role
/// reads data[b * strides[0] + t * strides[1] + h * strides[2] + c * strides[3]]; a stride of 0
/// broadcasts (parameters [1, 1, H, 1], structural scalars).
struct FusedOperand {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t strides[kFusedRank] = {0, 0, 0, 0};
};

/// The operands of one computed role, in the order of the generated function's arguments.
/// A per-channel role (q, k, diagonal decay) may name one `tile` operand: per token and channel,
/// in the kernel's dtype, contiguous [B, T, H, dk]; the kernel prefetches it like a q / k tile.
/// Its other operands are read where the role is evaluated.
struct RoleOperands {
  FusedOperand operands[kMaxRoleOperands];
  int count = 0;
  int tile = -1;  // index of the tile operand, or -1
};

/// Arguments of a fused chunk forward. Shape, h0, o, ht, scale and cu_seqlens as in
/// RecurrenceForwardArgs / RecurrenceShape; q / k are null when the variant computes them.
struct FusedForwardArgs {
  RecurrenceShape shape;
  DType dtype = DType::BF16;     // of q, k, v (tiles) and o
  const void* q = nullptr;       // [B, T, H, dk] raw (before the in-kernel L2 norm) or null
  const void* k = nullptr;       // [B, T, H, dk] raw or null
  const void* v = nullptr;       // [B, T, H, dv]
  RoleOperands qRole, kRole, decay, beta;  // used for the roles the variant computes
  const float* u = nullptr;      // [H, dk] (exclusive_bonus)
  const float* h0 = nullptr;     // [N, H, dk, dv] or null
  float scale = 1.0f;
  void* o = nullptr;             // [B, T, H, dv] written
  float* ht = nullptr;           // [N, H, dk, dv] written when non-null
};

/// The L2 norm the kernels and the composed path share: x / sqrt(sum x^2 + eps) per row.
inline constexpr float kL2NormEps = 1e-6f;

}  // namespace linac::kernels
