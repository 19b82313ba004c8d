// The implementation side of the emitted C API (linac_capi.h): the calls every variant's
// generated wrappers (src/<variant>_capi.cpp in an emitted package) make with the variant's
// RecurrenceKind and chunk. Each checks its tensors against the recurrence contract
// (kernels/common/recurrence.h), runs the CPU or CUDA kernels, and turns every exception into a
// status with the message stored for linac_last_error(). Nothing here depends on LibTorch.
#pragma once

#include "linac_capi.h"

#include "kernels/common/recurrence.h"

namespace linac::capi {

/// Inputs of a chunkwise call; pointers the kind does not use are null, and the optional ones
/// (initialState, cuSeqlens) may be null.
struct RecurrenceInputs {
  const char* function = "";             // the C function, named in error messages
  const linac_tensor* q = nullptr;       // [B, T, H, dk]
  const linac_tensor* k = nullptr;       // [B, T, H, dk]
  const linac_tensor* v = nullptr;       // [B, T, H, dv]
  const linac_tensor* g = nullptr;       // fixed [H], scalar [B, T, H], diagonal [B, T, H, dk]
  const linac_tensor* beta = nullptr;    // [B, T, H]
  const linac_tensor* u = nullptr;       // [H, dk]
  const linac_tensor* initialState = nullptr;  // [N, H, dk, dv]
  const linac_tensor* cuSeqlens = nullptr;     // [N + 1] I64, B == 1
  float scale = 1.0f;
};

struct ForwardOutputs {
  linac_tensor* o = nullptr;           // [B, T, H, dv], required
  linac_tensor* finalState = nullptr;  // [N, H, dk, dv], written when non-null
};

/// Upstream gradients and the gradients to write; every output may be null (not computed).
struct BackwardTensors {
  const linac_tensor* dO = nullptr;           // [B, T, H, dv], required
  const linac_tensor* dFinalState = nullptr;  // [N, H, dk, dv] or null (zeros)
  linac_tensor* dQ = nullptr;
  linac_tensor* dK = nullptr;
  linac_tensor* dV = nullptr;
  linac_tensor* dG = nullptr;     // the shape of g (fixed: [H], summed over tokens)
  linac_tensor* dBeta = nullptr;
  linac_tensor* dU = nullptr;
  linac_tensor* dInitialState = nullptr;
};

/// One decode step for B sequences: state [B, H, dk, dv] read and written, o [B, H, dv] written.
struct StepTensors {
  const char* function = "";
  const linac_tensor* q = nullptr;     // [B, H, dk]
  const linac_tensor* k = nullptr;     // [B, H, dk]
  const linac_tensor* v = nullptr;     // [B, H, dv]
  const linac_tensor* g = nullptr;     // fixed [H], scalar [B, H], diagonal [B, H, dk]
  const linac_tensor* beta = nullptr;  // [B, H]
  const linac_tensor* u = nullptr;     // [H, dk]
  float scale = 1.0f;
  linac_tensor* state = nullptr;
  linac_tensor* o = nullptr;
};

/// The vector-state scan (HGRN): x, g [B, T, D], initial / final state [N, D].
struct ScanInputs {
  const char* function = "";
  const linac_tensor* x = nullptr;
  const linac_tensor* g = nullptr;
  const linac_tensor* initialState = nullptr;
  const linac_tensor* cuSeqlens = nullptr;
};

linac_status recurrenceForward(const kernels::RecurrenceKind& kind, int chunk,
                               const RecurrenceInputs& in, const ForwardOutputs& out,
                               void* stream) noexcept;
linac_status recurrenceBackward(const kernels::RecurrenceKind& kind, int chunk,
                                const RecurrenceInputs& in, const BackwardTensors& grads,
                                void* stream) noexcept;
linac_status recurrenceStep(const kernels::RecurrenceKind& kind, const StepTensors& step,
                            void* stream) noexcept;

/// h [B, T, D] and, when non-null, finalState [N, D].
linac_status scanForward(const ScanInputs& in, linac_tensor* h, linac_tensor* finalState,
                         void* stream) noexcept;
/// dX, dG [B, T, D], dInitialState [N, D]; each may be null.
linac_status scanBackward(const ScanInputs& in, const linac_tensor* dH,
                          const linac_tensor* dFinalState, linac_tensor* dX, linac_tensor* dG,
                          linac_tensor* dInitialState, void* stream) noexcept;
/// One token: state [B, D] <- exp(g) * state + x, h [B, D] written. x, g [B, D].
linac_status scanStep(const char* function, const linac_tensor* x, const linac_tensor* g,
                      linac_tensor* state, linac_tensor* h, void* stream) noexcept;

}  // namespace linac::capi
