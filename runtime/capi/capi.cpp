// The C API's calls (capi_internal.h): check, fill the kernel contract's argument structs, run
// the CPU or CUDA kernels, report. Built only inside an emitted package (`linac emit`), whose
// CMakeLists.txt defines LINAC_KERNELS_CUDA when the CUDA backend is built and
// LINAC_KERNELS_VERSION always.
#include "capi_internal.h"

#include "capi_checks.h"
#include "kernels/cpu/cpu_kernels.h"

#ifdef LINAC_KERNELS_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

#include <cmath>
#include <string>
#include <vector>

namespace linac::capi {
namespace {

thread_local std::string lastError;

/// Runs `body`, mapping its exceptions to statuses and keeping the message.
template <class Body>
linac_status guarded(Body&& body) noexcept {
  try {
    body();
    lastError.clear();
    return LINAC_OK;
  } catch (const UnsupportedError& e) {
    lastError = e.what();
    return LINAC_UNSUPPORTED;
  } catch (const std::invalid_argument& e) {
    lastError = e.what();
    return LINAC_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    lastError = e.what();
    return LINAC_RUNTIME_ERROR;
  } catch (...) {
    lastError = "unknown error in the linac kernels";
    return LINAC_RUNTIME_ERROR;
  }
}

#ifdef LINAC_KERNELS_CUDA
cudaStream_t cudaStream(void* stream) { return static_cast<cudaStream_t>(stream); }
#endif

/// The log-decay's shape for `decay` ([H], [B, T, H] or [B, T, H, dk]); `tokens` false drops
/// T (the decode step's [B, H] / [B, H, dk]).
std::vector<Dim> decayShape(kernels::DecayClass decay, int64_t B, int64_t T, int64_t H, int64_t dk,
                            bool tokens) {
  std::vector<Dim> shape;
  if (decay == kernels::DecayClass::Fixed) return {{"H", H}};
  shape.push_back({"B", B});
  if (tokens) shape.push_back({"T", T});
  shape.push_back({"H", H});
  if (decay == kernels::DecayClass::Diagonal) shape.push_back({"dk", dk});
  return shape;
}

/// The value dim from v, which must be [B, T, H, dv] (or [B, H, dv] for a step).
int64_t valueDim(const CallChecks& checks, const linac_tensor& v, int rank) {
  if (v.ndim != rank)
    checks.fail("v has " + std::to_string(v.ndim) + " dims, expected " + std::to_string(rank) +
                (rank == 4 ? " [B, T, H, dv]" : " [B, H, dv]"));
  return v.shape[rank - 1];
}

void checkScale(const CallChecks& checks, float scale) {
  if (!std::isfinite(scale)) checks.fail("scale is " + std::to_string(scale) + "; pass a finite number");
}

/// A checked chunkwise call: the kernel contract's shape and forward arguments.
struct Prepared {
  explicit Prepared(const RecurrenceInputs& in) : checks(in.function, in.q, "q", {"B", "T", "H", "dk"}) {}
  CallChecks checks;
  kernels::RecurrenceShape shape;
  kernels::RecurrenceForwardArgs args;
  std::vector<int64_t> offsets;  // host copy of cu_seqlens
};

void prepare(const kernels::RecurrenceKind& kind, const RecurrenceInputs& in, Prepared& p) {
  const CallChecks& c = p.checks;
  const int64_t B = c.size(0), T = c.size(1), H = c.size(2), dk = c.size(3);
  c.check(*in.q, "q", Element::Value, {{"B", B}, {"T", T}, {"H", H}, {"dk", dk}});
  c.check(c.required(in.k, "k"), "k", Element::Value, {{"B", B}, {"T", T}, {"H", H}, {"dk", dk}});
  const linac_tensor& v = c.required(in.v, "v");
  const int64_t dv = valueDim(c, v, 4);
  c.check(v, "v", Element::Value, {{"B", B}, {"T", T}, {"H", H}, {"dv", dv}});
  if (kind.decay != kernels::DecayClass::None)
    c.check(c.required(in.g, "g"), "g", Element::F32, decayShape(kind.decay, B, T, H, dk, true));
  if (kind.update == kernels::UpdateRule::Delta)
    c.check(c.required(in.beta, "beta"), "beta", Element::F32, {{"B", B}, {"T", T}, {"H", H}});
  if (kind.readout == kernels::Readout::ExclusiveBonus)
    c.check(c.required(in.u, "u"), "u", Element::F32, {{"H", H}, {"dk", dk}});
  checkScale(c, in.scale);
  int64_t N = B;
  if (in.cuSeqlens) {
    p.offsets = c.sequenceOffsets(*in.cuSeqlens, B, T);
    N = int64_t(p.offsets.size()) - 1;
  }
  c.optional(in.initialState, "initial_state", Element::F32,
             {{"N", N}, {"H", H}, {"dk", dk}, {"dv", dv}});

  p.shape = {B, T, H, dk, dv, nullptr, N};
  if (in.cuSeqlens)
    p.shape.cu_seqlens = c.device() == LINAC_CPU ? p.offsets.data()
                                                 : static_cast<const int64_t*>(in.cuSeqlens->data);
  p.args.q = in.q->data;
  p.args.k = in.k->data;
  p.args.v = in.v->data;
  if (kind.decay != kernels::DecayClass::None) p.args.g = static_cast<const float*>(in.g->data);
  if (kind.update == kernels::UpdateRule::Delta) p.args.beta = static_cast<const float*>(in.beta->data);
  if (kind.readout == kernels::Readout::ExclusiveBonus) p.args.u = static_cast<const float*>(in.u->data);
  if (in.initialState) p.args.h0 = static_cast<const float*>(in.initialState->data);
  p.args.scale = in.scale;
}

std::vector<Dim> valueShape(const kernels::RecurrenceShape& s) {
  return {{"B", s.batch}, {"T", s.seq_len}, {"H", s.heads}, {"dv", s.value_dim}};
}
std::vector<Dim> keyShape(const kernels::RecurrenceShape& s) {
  return {{"B", s.batch}, {"T", s.seq_len}, {"H", s.heads}, {"dk", s.key_dim}};
}
std::vector<Dim> stateShape(const kernels::RecurrenceShape& s) {
  return {{"N", s.num_seqs}, {"H", s.heads}, {"dk", s.key_dim}, {"dv", s.value_dim}};
}

template <class T>
T* dataOf(linac_tensor* t) {
  return t ? static_cast<T*>(t->data) : nullptr;
}

}  // namespace

linac_status recurrenceForward(const kernels::RecurrenceKind& kind, int chunk,
                               const RecurrenceInputs& in, const ForwardOutputs& out,
                               void* stream) noexcept {
  return guarded([&] {
    Prepared p(in);
    prepare(kind, in, p);
    const CallChecks& c = p.checks;
    c.check(c.required(out.o, "o"), "o", Element::Value, valueShape(p.shape));
    c.optional(out.finalState, "final_state", Element::F32, stateShape(p.shape));
    p.args.o = out.o->data;
    p.args.ht = dataOf<float>(out.finalState);
    if (c.device() == LINAC_CPU) {
      kernels::cpu::chunkForward(kind, p.shape, p.args, c.dtype(), chunk);
      return;
    }
#ifdef LINAC_KERNELS_CUDA
    kernels::cuda::chunkForward(kind, c.dtype(), p.shape, p.args, cudaStream(stream));
#else
    (void)stream;
#endif
  });
}

linac_status recurrenceBackward(const kernels::RecurrenceKind& kind, int chunk,
                                const RecurrenceInputs& in, const BackwardTensors& grads,
                                void* stream) noexcept {
  return guarded([&] {
    Prepared p(in);
    prepare(kind, in, p);
    const CallChecks& c = p.checks;
    c.check(c.required(grads.dO, "d_o"), "d_o", Element::Value, valueShape(p.shape));
    c.optional(grads.dFinalState, "d_final_state", Element::F32, stateShape(p.shape));
    c.optional(grads.dQ, "d_q", Element::Value, keyShape(p.shape));
    c.optional(grads.dK, "d_k", Element::Value, keyShape(p.shape));
    c.optional(grads.dV, "d_v", Element::Value, valueShape(p.shape));
    const auto& s = p.shape;
    if (kind.decay != kernels::DecayClass::None)
      c.optional(grads.dG, "d_g", Element::F32,
                 decayShape(kind.decay, s.batch, s.seq_len, s.heads, s.key_dim, true));
    if (kind.update == kernels::UpdateRule::Delta)
      c.optional(grads.dBeta, "d_beta", Element::F32, {{"B", s.batch}, {"T", s.seq_len}, {"H", s.heads}});
    if (kind.readout == kernels::Readout::ExclusiveBonus)
      c.optional(grads.dU, "d_u", Element::F32, {{"H", s.heads}, {"dk", s.key_dim}});
    c.optional(grads.dInitialState, "d_initial_state", Element::F32, stateShape(p.shape));

    kernels::RecurrenceBackwardArgs args;
    args.fwd = p.args;
    args.d_o = grads.dO->data;
    args.d_ht = grads.dFinalState ? static_cast<const float*>(grads.dFinalState->data) : nullptr;
    args.d_q = dataOf<void>(grads.dQ);
    args.d_k = dataOf<void>(grads.dK);
    args.d_v = dataOf<void>(grads.dV);
    if (kind.decay != kernels::DecayClass::None) args.d_g = dataOf<float>(grads.dG);
    if (kind.update == kernels::UpdateRule::Delta) args.d_beta = dataOf<float>(grads.dBeta);
    if (kind.readout == kernels::Readout::ExclusiveBonus) args.d_u = dataOf<float>(grads.dU);
    args.d_h0 = dataOf<float>(grads.dInitialState);
    if (c.device() == LINAC_CPU) {
      kernels::cpu::chunkBackward(kind, p.shape, args, c.dtype(), chunk);
      return;
    }
#ifdef LINAC_KERNELS_CUDA
    kernels::cuda::chunkBackward(kind, c.dtype(), p.shape, args, cudaStream(stream));
#else
    (void)stream;
#endif
  });
}

linac_status recurrenceStep(const kernels::RecurrenceKind& kind, const StepTensors& step,
                            void* stream) noexcept {
  return guarded([&] {
    CallChecks c(step.function, step.q, "q", {"B", "H", "dk"});
    const int64_t B = c.size(0), H = c.size(1), dk = c.size(2);
    c.check(*step.q, "q", Element::Value, {{"B", B}, {"H", H}, {"dk", dk}});
    c.check(c.required(step.k, "k"), "k", Element::Value, {{"B", B}, {"H", H}, {"dk", dk}});
    const linac_tensor& v = c.required(step.v, "v");
    const int64_t dv = valueDim(c, v, 3);
    c.check(v, "v", Element::Value, {{"B", B}, {"H", H}, {"dv", dv}});
    kernels::RecurrenceStepArgs args;
    if (kind.decay != kernels::DecayClass::None) {
      c.check(c.required(step.g, "g"), "g", Element::F32, decayShape(kind.decay, B, 1, H, dk, false));
      args.g = static_cast<const float*>(step.g->data);
    }
    if (kind.update == kernels::UpdateRule::Delta) {
      c.check(c.required(step.beta, "beta"), "beta", Element::F32, {{"B", B}, {"H", H}});
      args.beta = static_cast<const float*>(step.beta->data);
    }
    if (kind.readout == kernels::Readout::ExclusiveBonus) {
      c.check(c.required(step.u, "u"), "u", Element::F32, {{"H", H}, {"dk", dk}});
      args.u = static_cast<const float*>(step.u->data);
    }
    checkScale(c, step.scale);
    c.check(c.required(step.state, "state"), "state", Element::F32, {{"B", B}, {"H", H}, {"dk", dk}, {"dv", dv}});
    c.check(c.required(step.o, "o"), "o", Element::Value, {{"B", B}, {"H", H}, {"dv", dv}});
    args.q = step.q->data;
    args.k = step.k->data;
    args.v = step.v->data;
    args.scale = step.scale;
    args.state = static_cast<float*>(step.state->data);
    args.o = step.o->data;
    if (c.device() == LINAC_CPU) {
      kernels::cpu::recurrentStep(kind, B, H, dk, dv, args, c.dtype());
      return;
    }
#ifdef LINAC_KERNELS_CUDA
    const kernels::RecurrenceShape shape{B, 1, H, dk, dv, nullptr, B};
    kernels::cuda::recurrentStep(kind, c.dtype(), shape, args, cudaStream(stream));
#else
    (void)stream;
#endif
  });
}

namespace {

/// A checked scan call: x, g [B, T, D], the optional initial state and cu_seqlens.
struct PreparedScan {
  explicit PreparedScan(const ScanInputs& in) : checks(in.function, in.x, "x", {"B", "T", "D"}) {}
  CallChecks checks;
  kernels::ScanShape shape;
  kernels::ScanForwardArgs args;
  std::vector<int64_t> offsets;
};

void prepareScan(const ScanInputs& in, PreparedScan& p) {
  const CallChecks& c = p.checks;
  const int64_t B = c.size(0), T = c.size(1), D = c.size(2);
  c.check(*in.x, "x", Element::Value, {{"B", B}, {"T", T}, {"D", D}});
  c.check(c.required(in.g, "g"), "g", Element::F32, {{"B", B}, {"T", T}, {"D", D}});
  int64_t N = B;
  if (in.cuSeqlens) {
    p.offsets = c.sequenceOffsets(*in.cuSeqlens, B, T);
    N = int64_t(p.offsets.size()) - 1;
  }
  c.optional(in.initialState, "initial_state", Element::F32, {{"N", N}, {"D", D}});
  p.shape = {B, T, D, nullptr, N};
  if (in.cuSeqlens)
    p.shape.cu_seqlens = c.device() == LINAC_CPU ? p.offsets.data()
                                                 : static_cast<const int64_t*>(in.cuSeqlens->data);
  p.args.x = in.x->data;
  p.args.g = static_cast<const float*>(in.g->data);
  if (in.initialState) p.args.h0 = static_cast<const float*>(in.initialState->data);
}

void runScanForward(const CallChecks& c, const kernels::ScanShape& shape,
                    const kernels::ScanForwardArgs& args, void* stream) {
  if (c.device() == LINAC_CPU) {
    kernels::cpu::scanForward(shape, args, c.dtype());
    return;
  }
#ifdef LINAC_KERNELS_CUDA
  kernels::cuda::scanForward(c.dtype(), shape, args, cudaStream(stream));
#else
  (void)stream;
#endif
}

}  // namespace

linac_status scanForward(const ScanInputs& in, linac_tensor* h, linac_tensor* finalState,
                         void* stream) noexcept {
  return guarded([&] {
    PreparedScan p(in);
    prepareScan(in, p);
    const CallChecks& c = p.checks;
    const auto& s = p.shape;
    c.check(c.required(h, "h"), "h", Element::Value, {{"B", s.batch}, {"T", s.seq_len}, {"D", s.channels}});
    c.optional(finalState, "final_state", Element::F32, {{"N", s.num_seqs}, {"D", s.channels}});
    p.args.h = h->data;
    p.args.ht = dataOf<float>(finalState);
    runScanForward(c, p.shape, p.args, stream);
  });
}

linac_status scanBackward(const ScanInputs& in, const linac_tensor* dH,
                          const linac_tensor* dFinalState, linac_tensor* dX, linac_tensor* dG,
                          linac_tensor* dInitialState, void* stream) noexcept {
  return guarded([&] {
    PreparedScan p(in);
    prepareScan(in, p);
    const CallChecks& c = p.checks;
    const auto& s = p.shape;
    const std::vector<Dim> tokens{{"B", s.batch}, {"T", s.seq_len}, {"D", s.channels}};
    const std::vector<Dim> states{{"N", s.num_seqs}, {"D", s.channels}};
    c.check(c.required(dH, "d_h"), "d_h", Element::Value, tokens);
    c.optional(dFinalState, "d_final_state", Element::F32, states);
    c.optional(dX, "d_x", Element::Value, tokens);
    c.optional(dG, "d_g", Element::F32, tokens);
    c.optional(dInitialState, "d_initial_state", Element::F32, states);
    kernels::ScanBackwardArgs args;
    args.fwd = p.args;
    args.d_h = dH->data;
    args.d_ht = dFinalState ? static_cast<const float*>(dFinalState->data) : nullptr;
    args.d_x = dataOf<void>(dX);
    args.d_g = dataOf<float>(dG);
    args.d_h0 = dataOf<float>(dInitialState);
    if (c.device() == LINAC_CPU) {
      kernels::cpu::scanBackward(p.shape, args, c.dtype());
      return;
    }
#ifdef LINAC_KERNELS_CUDA
    kernels::cuda::scanBackward(c.dtype(), p.shape, args, cudaStream(stream));
#else
    (void)stream;
#endif
  });
}

linac_status scanStep(const char* function, const linac_tensor* x, const linac_tensor* g,
                      linac_tensor* state, linac_tensor* h, void* stream) noexcept {
  return guarded([&] {
    CallChecks c(function, x, "x", {"B", "D"});
    const int64_t B = c.size(0), D = c.size(1);
    const std::vector<Dim> shape{{"B", B}, {"D", D}};
    c.check(*x, "x", Element::Value, shape);
    c.check(c.required(g, "g"), "g", Element::F32, shape);
    c.check(c.required(state, "state"), "state", Element::F32, shape);
    c.check(c.required(h, "h"), "h", Element::Value, shape);
    // One token of the scan: T = 1, the state read as h0 and written as ht (each channel reads
    // its h0 before writing its ht, in both backends).
    kernels::ScanForwardArgs args;
    args.x = x->data;
    args.g = static_cast<const float*>(g->data);
    args.h0 = static_cast<const float*>(state->data);
    args.ht = static_cast<float*>(state->data);
    args.h = h->data;
    runScanForward(c, kernels::ScanShape{B, 1, D, nullptr, B}, args, stream);
  });
}

}  // namespace linac::capi

extern "C" {

LINAC_API linac_tensor linac_tensor_contiguous(void* data, linac_dtype dtype, linac_device device,
                                               int32_t ndim, const int64_t* shape) {
  linac_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim;  // an ndim outside [0, LINAC_MAX_DIMS] is kept, and refused by every call
  const int filled = ndim < 0 ? 0 : ndim > LINAC_MAX_DIMS ? LINAC_MAX_DIMS : ndim;
  int64_t stride = 1;
  for (int i = filled - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

LINAC_API const char* linac_last_error(void) { return linac::capi::lastError.c_str(); }

LINAC_API int linac_has_cuda(void) {
#ifdef LINAC_KERNELS_CUDA
  return 1;
#else
  return 0;
#endif
}

LINAC_API const char* linac_version(void) { return LINAC_KERNELS_VERSION; }

}  // extern "C"
