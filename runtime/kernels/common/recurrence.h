// The contract between kernel skeletons (CPU and CUDA), the code the emitter generates, and the
// torch-facing ops. Plain C++ so it compiles under nvcc, the host compiler and the emitted
// standalone library alike; no torch, no MLIR.
//
// One linear-attention recurrence, per sequence n and head h, tokens t = 0..T_n-1
// (DESIGN.md section 3). Keys q_t, k_t in R^dk, values v_t in R^dv, state S in R^(dk x dv) fp32,
// log-decay g_t <= 0 (fp32):
//   additive: S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T
//   delta:    S_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T
//   inclusive readout:        o_t = scale * S_t^T q_t
//   exclusive_bonus readout:  o_t = scale * (S_{t-1}^T q_t + ((q_t * u * k_t) . 1) v_t)
// Vector state (HGRN): h_t = exp(g_t) * h_{t-1} + x_t elementwise, over D channels.
#pragma once

#include <cstdint>

namespace linac::kernels {

/// How the log-decay g varies, which fixes its tensor shape:
///   None     -> no tensor (g = 0)
///   Fixed    -> [H]            one constant per head
///   Scalar   -> [B, T, H]      one value per head and token
///   Diagonal -> [B, T, H, dk]  one value per key channel, head and token
enum class DecayClass : int { None = 0, Fixed = 1, Scalar = 2, Diagonal = 3 };
enum class UpdateRule : int { Additive = 0, Delta = 1 };
enum class Readout : int { Inclusive = 0, ExclusiveBonus = 1 };
/// Element type of q, k, v, o and their gradients. g, beta, u and states are always fp32.
enum class DType : int { F32 = 0, BF16 = 1, F16 = 2 };

/// The static shape of a recurrence: what the emitter fixes from a spec.
struct RecurrenceKind {
  DecayClass decay = DecayClass::None;
  UpdateRule update = UpdateRule::Additive;
  Readout readout = Readout::Inclusive;
  /// The decay is a product with an exp factor of a learned operand (RWKV-6's -exp(w)), so that
  /// operand's gradient weighs d_g by the decay itself: d_g must be accurate where the decay is
  /// strong (the Hopper diagonal backward then takes Ks / Qs in two 16-bit halves). Set by
  /// linac-select-algorithm (the tile's precise_decay_grad).
  bool preciseDecayGrad = false;
};

/// Sizes of one call. Tensors are contiguous [B, T, H, D] (fla's layout). With cu_seqlens
/// (packed varlen) B must be 1 and sequence n spans tokens [cu_seqlens[n], cu_seqlens[n+1]).
struct RecurrenceShape {
  int64_t batch = 0;      // B
  int64_t seq_len = 0;    // T (padded length when B > 1, total tokens when varlen)
  int64_t heads = 0;      // H
  int64_t key_dim = 0;    // dk
  int64_t value_dim = 0;  // dv
  const int64_t* cu_seqlens = nullptr;  // [N + 1] host pointer on CPU, device pointer on CUDA
  int64_t num_seqs = 0;   // N (= B without cu_seqlens)
};

/// Forward arguments. Pointers not used by the kind are null.
struct RecurrenceForwardArgs {
  const void* q = nullptr;      // [B, T, H, dk] dtype
  const void* k = nullptr;      // [B, T, H, dk] dtype
  const void* v = nullptr;      // [B, T, H, dv] dtype
  const float* g = nullptr;     // see DecayClass
  const float* beta = nullptr;  // [B, T, H]      (delta only)
  const float* u = nullptr;     // [H, dk]        (exclusive_bonus only)
  const float* h0 = nullptr;    // [N, H, dk, dv] initial state, null = zeros
  float scale = 1.0f;
  void* o = nullptr;            // [B, T, H, dv] dtype, written
  float* ht = nullptr;          // [N, H, dk, dv] final state, written when non-null
};

/// Backward arguments: the forward's inputs plus upstream gradients; gradients are written
/// (not accumulated). Gradient pointers for inputs the kind does not use are null.
struct RecurrenceBackwardArgs {
  RecurrenceForwardArgs fwd;    // fwd.o and fwd.ht are ignored
  const void* d_o = nullptr;    // [B, T, H, dv] dtype
  const float* d_ht = nullptr;  // [N, H, dk, dv] or null (= zeros)
  void* d_q = nullptr;          // [B, T, H, dk] dtype
  void* d_k = nullptr;          // [B, T, H, dk] dtype
  void* d_v = nullptr;          // [B, T, H, dv] dtype
  float* d_g = nullptr;         // same shape as g (Fixed: [H], summed over all tokens)
  float* d_beta = nullptr;      // [B, T, H]
  float* d_u = nullptr;         // [H, dk]
  float* d_h0 = nullptr;        // [N, H, dk, dv]
};

/// One decode step for B independent sequences (T = 1): state [B, H, dk, dv] updated in place.
struct RecurrenceStepArgs {
  const void* q = nullptr;      // [B, H, dk] dtype
  const void* k = nullptr;      // [B, H, dk] dtype
  const void* v = nullptr;      // [B, H, dv] dtype
  const float* g = nullptr;     // Fixed [H], Scalar [B, H], Diagonal [B, H, dk]
  const float* beta = nullptr;  // [B, H]
  const float* u = nullptr;     // [H, dk]
  float scale = 1.0f;
  float* state = nullptr;       // [B, H, dk, dv] fp32, read and written
  void* o = nullptr;            // [B, H, dv] dtype
};

/// Vector-state scan (HGRN): h_t = exp(g_t) * h_{t-1} + x_t, channels independent.
struct ScanForwardArgs {
  const void* x = nullptr;      // [B, T, D] dtype
  const float* g = nullptr;     // [B, T, D] fp32 log-decay
  const float* h0 = nullptr;    // [N, D] or null
  void* h = nullptr;            // [B, T, D] dtype, written
  float* ht = nullptr;          // [N, D] or null
};
struct ScanBackwardArgs {
  ScanForwardArgs fwd;
  const void* d_h = nullptr;    // [B, T, D] dtype
  const float* d_ht = nullptr;  // [N, D] or null
  void* d_x = nullptr;          // [B, T, D] dtype
  float* d_g = nullptr;         // [B, T, D]
  float* d_h0 = nullptr;        // [N, D] or null
};
struct ScanShape {
  int64_t batch = 0, seq_len = 0, channels = 0;
  const int64_t* cu_seqlens = nullptr;
  int64_t num_seqs = 0;
};

}  // namespace linac::kernels
