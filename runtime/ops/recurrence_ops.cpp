// The torch autograd ops over the recurrence kernels (header: recurrence_ops.h).
//
// Each public op validates its arguments before autograd sees anything (recurrence_checks.h),
// then runs one torch::autograd::Function whose passes call the kernels by device
// (kernel_dispatch.h). Forward passes run the kernels on contiguous inputs (copies only where an
// input is not contiguous, or g / beta / u are not fp32) and save exactly what they ran on;
// backward passes call the backward kernels with null pointers for every gradient autograd does
// not need.
#include "recurrence_ops.h"

#include "checks.h"
#include "kernel_dispatch.h"
#include "padding.h"
#include "recurrence_checks.h"

#include <torch/autograd.h>

#include <initializer_list>
#include <optional>
#include <vector>

namespace linac::ops {
namespace {

using namespace detail;  // kernel dispatch and validation (internal to runtime/ops)
using kernels::DecayClass;
using kernels::Readout;
using kernels::RecurrenceKind;
using kernels::UpdateRule;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// --- small tensor helpers --------------------------------------------------------------------

template <typename T>
T* ptrOrNull(const torch::Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

torch::Tensor contiguousOrUndefined(const torch::Tensor& t) {
  return t.defined() ? t.contiguous() : t;
}

/// g, beta, u as the kernels read them: contiguous fp32.
torch::Tensor contiguousF32(const torch::Tensor& t) {
  return t.defined() ? t.to(torch::kFloat).contiguous() : t;
}

// Function::apply treats an undefined torch::Tensor argument as a variable and fails on it;
// optional tensors that are absent are passed as nullopt (no autograd edge) instead.
using OptionalTensor = std::optional<torch::Tensor>;

OptionalTensor optionalOf(const torch::Tensor& t) {
  return t.defined() ? OptionalTensor(t) : std::nullopt;
}

torch::Tensor valueOf(const OptionalTensor& t) { return t.value_or(torch::Tensor()); }

/// Autograd edge index of each tensor argument: only defined tensors get an edge, so the i-th
/// argument's index is the number of defined tensors before it (-1: undefined, no gradient).
std::vector<int64_t> edgeIndices(std::initializer_list<const torch::Tensor*> arguments) {
  std::vector<int64_t> edges;
  int64_t next = 0;
  for (const torch::Tensor* t : arguments) edges.push_back(t->defined() ? next++ : -1);
  return edges;
}

bool needsGrad(AutogradContext* ctx, const c10::IValue& edges, size_t argument) {
  const int64_t edge = edges.toIntVector()[argument];
  return edge >= 0 && ctx->needs_input_grad(static_cast<size_t>(edge));
}

torch::Tensor emptyLikeOrUndefined(const torch::Tensor& t, bool wanted) {
  return wanted && t.defined() ? torch::empty_like(t) : torch::Tensor();
}

/// The offsets the kernels read: the host copy on CPU, a device copy on CUDA.
torch::Tensor cuSeqlensFor(const torch::Tensor& host, const torch::Device& device) {
  if (!host.defined() || device.is_cpu()) return host;
  return host.to(device);
}

// --- the chunkwise recurrence ----------------------------------------------------------------

/// Forward: o [B, T, H, dv] (and ht [N, H, dk, dv] when requested) from the chunk kernels.
/// Backward: gradients of q, k, v (their dtype), g, beta, u (their input dtypes), h0 (fp32).
struct RecurrenceFunction : public torch::autograd::Function<RecurrenceFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const OptionalTensor& g_arg,
                               const OptionalTensor& beta_arg, const OptionalTensor& u_arg,
                               const OptionalTensor& h0_arg, const OptionalTensor& cu_seqlens_arg,
                               const RecurrenceKind& kind, double scale, int64_t chunk,
                               bool output_final_state) {
    const torch::Tensor g = valueOf(g_arg), beta = valueOf(beta_arg), u = valueOf(u_arg),
                        h0 = valueOf(h0_arg), cu_seqlens_host = valueOf(cu_seqlens_arg);
    const torch::Tensor qc = q.contiguous(), kc = k.contiguous(),
                        vc = v.contiguous();              // [B, T, H, d]
    const torch::Tensor g32 = contiguousF32(g);           // [H] / [B, T, H] / [B, T, H, dk]
    const torch::Tensor beta32 = contiguousF32(beta);     // [B, T, H]
    const torch::Tensor u32 = contiguousF32(u);           // [H, dk]
    const torch::Tensor h0c = contiguousOrUndefined(h0);  // [N, H, dk, dv] fp32
    const torch::Device device = q.device();
    const torch::Tensor cu = cuSeqlensFor(cu_seqlens_host, device);  // [N + 1]

    const kernels::RecurrenceShape shape = makeShape(qc, vc, cu_seqlens_host, cu);
    torch::Tensor o =
        torch::empty({shape.batch, shape.seq_len, shape.heads, shape.value_dim}, vc.options());
    torch::Tensor ht;
    if (output_final_state) {
      ht = torch::empty({shape.num_seqs, shape.heads, shape.key_dim, shape.value_dim},
                        vc.options().dtype(torch::kFloat));
    }
    kernels::RecurrenceForwardArgs args =
        forwardArgs(qc, kc, vc, g32, beta32, u32, h0c, static_cast<float>(scale));
    args.o = o.data_ptr();
    args.ht = ptrOrNull<float>(ht);
    chunkForward(kRecurrenceOp, device, kind, checks::kernelDtype(q.scalar_type()), shape, args,
                 chunk);

    ctx->save_for_backward({qc, kc, vc, g32, beta32, u32, h0c, cu_seqlens_host});
    ctx->saved_data["edges"] = edgeIndices({&q, &k, &v, &g, &beta, &u, &h0});
    ctx->saved_data["decay"] = static_cast<int64_t>(kind.decay);
    ctx->saved_data["update"] = static_cast<int64_t>(kind.update);
    ctx->saved_data["readout"] = static_cast<int64_t>(kind.readout);
    ctx->saved_data["precise_decay_grad"] = kind.preciseDecayGrad;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["g_dtype"] = g.defined() ? g.scalar_type() : torch::kFloat;
    ctx->saved_data["beta_dtype"] = beta.defined() ? beta.scalar_type() : torch::kFloat;
    ctx->saved_data["u_dtype"] = u.defined() ? u.scalar_type() : torch::kFloat;
    ctx->set_materialize_grads(false);  // an unused ht passes d_ht = null, not zeros
    if (output_final_state) return {o, ht};
    return {o};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &g = saved[3],
                        &beta = saved[4], &u = saved[5], &h0 = saved[6], &cu_host = saved[7];
    const RecurrenceKind kind{static_cast<DecayClass>(ctx->saved_data["decay"].toInt()),
                              static_cast<UpdateRule>(ctx->saved_data["update"].toInt()),
                              static_cast<Readout>(ctx->saved_data["readout"].toInt()),
                              ctx->saved_data["precise_decay_grad"].toBool()};
    const auto& edges = ctx->saved_data["edges"];
    RecurrenceWanted wanted{needsGrad(ctx, edges, 0), needsGrad(ctx, edges, 1),
                            needsGrad(ctx, edges, 2), needsGrad(ctx, edges, 3),
                            needsGrad(ctx, edges, 4), needsGrad(ctx, edges, 5),
                            needsGrad(ctx, edges, 6)};
    const torch::Tensor d_ht = grad_outputs.size() > 1 ? grad_outputs[1] : torch::Tensor();
    const RecurrenceOptions options{kind, ctx->saved_data["scale"].toDouble(),
                                    ctx->saved_data["chunk"].toInt(), false};
    const RecurrenceGrads r = backwardKernels({q, k, v, g, beta, u, h0, cu_host}, options,
                                               grad_outputs[0], d_ht, wanted);
    const torch::Tensor grads[7] = {r.q, r.k, r.v, r.g, r.beta, r.u, r.h0};

    auto castBack = [&](const torch::Tensor& grad, const char* dtype_key) {
      return grad.defined() ? grad.to(ctx->saved_data[dtype_key].toScalarType()) : grad;
    };
    // One entry per forward argument: q, k, v, g, beta, u, h0, cu_seqlens, kind, scale, chunk,
    // output_final_state.
    return {grads[0],
            grads[1],
            grads[2],
            castBack(grads[3], "g_dtype"),
            castBack(grads[4], "beta_dtype"),
            castBack(grads[5], "u_dtype"),
            grads[6],
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }

  /// The backward kernels on inputs in the form forward saved them (contiguous; g, beta, u, h0
  /// fp32). d_o undefined: zeros (o unused); d_ht undefined: null.
  static RecurrenceGrads backwardKernels(const RecurrenceInputs& in, const RecurrenceOptions& options,
                                         const torch::Tensor& d_o_arg, const torch::Tensor& d_ht_arg,
                                         const RecurrenceWanted& wanted) {
    const torch::Tensor &q = in.q, &k = in.k, &v = in.v, &g = in.g, &beta = in.beta, &u = in.u,
                        &h0 = in.h0, &cu_host = in.cu_seqlens;
    const torch::Device device = q.device();
    const torch::Tensor cu = cuSeqlensFor(cu_host, device);
    const kernels::RecurrenceShape shape = makeShape(q, v, cu_host, cu);

    // Upstream gradients: d_o [B, T, H, dv] in o's dtype (zeros when o was unused),
    // d_ht [N, H, dk, dv] fp32 (null when ht was not returned or unused).
    const torch::Tensor d_o =
        d_o_arg.defined() ? d_o_arg.to(v.scalar_type()).contiguous() : torch::zeros_like(v);
    const torch::Tensor d_ht = d_ht_arg.defined() ? d_ht_arg.to(torch::kFloat).contiguous() : d_ht_arg;

    RecurrenceGrads grads{emptyLikeOrUndefined(q, wanted.q),       emptyLikeOrUndefined(k, wanted.k),
                          emptyLikeOrUndefined(v, wanted.v),       emptyLikeOrUndefined(g, wanted.g),
                          emptyLikeOrUndefined(beta, wanted.beta), emptyLikeOrUndefined(u, wanted.u),
                          emptyLikeOrUndefined(h0, wanted.h0)};
    kernels::RecurrenceBackwardArgs args;
    args.fwd = forwardArgs(q, k, v, g, beta, u, h0, static_cast<float>(options.scale));
    args.d_o = d_o.data_ptr();
    args.d_ht = ptrOrNull<float>(d_ht);
    args.d_q = ptrOrNull<void>(grads.q);
    args.d_k = ptrOrNull<void>(grads.k);
    args.d_v = ptrOrNull<void>(grads.v);
    args.d_g = ptrOrNull<float>(grads.g);
    args.d_beta = ptrOrNull<float>(grads.beta);
    args.d_u = ptrOrNull<float>(grads.u);
    args.d_h0 = ptrOrNull<float>(grads.h0);
    chunkBackward(kRecurrenceOp, device, options.kind, checks::kernelDtype(q.scalar_type()), shape,
                  args, options.chunk);
    return grads;
  }

  static kernels::RecurrenceShape makeShape(const torch::Tensor& q, const torch::Tensor& v,
                                            const torch::Tensor& cu_host,
                                            const torch::Tensor& cu_kernel) {
    kernels::RecurrenceShape shape;
    shape.batch = q.size(0);
    shape.seq_len = q.size(1);
    shape.heads = q.size(2);
    shape.key_dim = q.size(3);
    shape.value_dim = v.size(3);
    shape.cu_seqlens = ptrOrNull<const int64_t>(cu_kernel);
    shape.num_seqs = cu_host.defined() ? cu_host.numel() - 1 : shape.batch;
    return shape;
  }

  static kernels::RecurrenceForwardArgs forwardArgs(const torch::Tensor& q, const torch::Tensor& k,
                                                    const torch::Tensor& v, const torch::Tensor& g,
                                                    const torch::Tensor& beta,
                                                    const torch::Tensor& u, const torch::Tensor& h0,
                                                    float scale) {
    kernels::RecurrenceForwardArgs args;
    args.q = q.data_ptr();
    args.k = k.data_ptr();
    args.v = v.data_ptr();
    args.g = ptrOrNull<const float>(g);
    args.beta = ptrOrNull<const float>(beta);
    args.u = ptrOrNull<const float>(u);
    args.h0 = ptrOrNull<const float>(h0);
    args.scale = scale;
    return args;
  }
};

// --- the HGRN vector scan --------------------------------------------------------------------

/// Forward: h [B, T, D] in x's dtype (and ht [N, D] fp32 when requested).
/// Backward: gradients of x (its dtype), g (its input dtype), h0 (fp32).
struct ScanFunction : public torch::autograd::Function<ScanFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& g,
                               const OptionalTensor& h0_arg, const OptionalTensor& cu_seqlens_arg,
                               bool output_final_state) {
    const torch::Tensor h0 = valueOf(h0_arg), cu_seqlens_host = valueOf(cu_seqlens_arg);
    const torch::Tensor xc = x.contiguous();              // [B, T, D]
    const torch::Tensor g32 = contiguousF32(g);           // [B, T, D]
    const torch::Tensor h0c = contiguousOrUndefined(h0);  // [N, D] fp32
    const torch::Device device = x.device();
    const torch::Tensor cu = cuSeqlensFor(cu_seqlens_host, device);  // [N + 1]
    const kernels::ScanShape shape = makeShape(xc, cu_seqlens_host, cu);

    torch::Tensor h = torch::empty_like(xc);
    torch::Tensor ht;
    if (output_final_state) {
      ht = torch::empty({shape.num_seqs, shape.channels}, xc.options().dtype(torch::kFloat));
    }
    kernels::ScanForwardArgs args{xc.data_ptr(), g32.data_ptr<float>(), ptrOrNull<const float>(h0c),
                                  h.data_ptr(), ptrOrNull<float>(ht)};
    scanForward(kScanOp, device, checks::kernelDtype(x.scalar_type()), shape, args);

    ctx->save_for_backward({xc, g32, h0c, cu_seqlens_host});
    ctx->saved_data["g_dtype"] = g.scalar_type();
    ctx->saved_data["edges"] = edgeIndices({&x, &g, &h0});
    ctx->set_materialize_grads(false);
    if (output_final_state) return {h, ht};
    return {h};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &g = saved[1], &h0 = saved[2], &cu_host = saved[3];
    const torch::Device device = x.device();
    const torch::Tensor cu = cuSeqlensFor(cu_host, device);
    const kernels::ScanShape shape = makeShape(x, cu_host, cu);

    const torch::Tensor d_h = grad_outputs[0].defined()  // [B, T, D]
                                  ? grad_outputs[0].to(x.scalar_type()).contiguous()
                                  : torch::zeros_like(x);
    torch::Tensor d_ht;  // [N, D]
    if (grad_outputs.size() > 1 && grad_outputs[1].defined()) {
      d_ht = grad_outputs[1].to(torch::kFloat).contiguous();
    }
    const c10::IValue& edges = ctx->saved_data["edges"];
    const torch::Tensor d_x = emptyLikeOrUndefined(x, needsGrad(ctx, edges, 0));
    torch::Tensor d_g = emptyLikeOrUndefined(g, needsGrad(ctx, edges, 1));
    const torch::Tensor d_h0 = emptyLikeOrUndefined(h0, needsGrad(ctx, edges, 2));

    kernels::ScanBackwardArgs args;
    args.fwd = {x.data_ptr(), g.data_ptr<float>(), ptrOrNull<const float>(h0), nullptr, nullptr};
    args.d_h = d_h.data_ptr();
    args.d_ht = ptrOrNull<const float>(d_ht);
    args.d_x = ptrOrNull<void>(d_x);
    args.d_g = ptrOrNull<float>(d_g);
    args.d_h0 = ptrOrNull<float>(d_h0);
    scanBackward(kScanOp, device, checks::kernelDtype(x.scalar_type()), shape, args);

    if (d_g.defined()) d_g = d_g.to(ctx->saved_data["g_dtype"].toScalarType());
    return {d_x, d_g, d_h0, torch::Tensor(), torch::Tensor()};
  }

  static kernels::ScanShape makeShape(const torch::Tensor& x, const torch::Tensor& cu_host,
                                      const torch::Tensor& cu_kernel) {
    kernels::ScanShape shape;
    shape.batch = x.size(0);
    shape.seq_len = x.size(1);
    shape.channels = x.size(2);
    shape.cu_seqlens = ptrOrNull<const int64_t>(cu_kernel);
    shape.num_seqs = cu_host.defined() ? cu_host.numel() - 1 : shape.batch;
    return shape;
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> recurrence(const RecurrenceInputs& in,
                                                   const RecurrenceOptions& options) {
  const RecurrenceDims dims = checkRecurrence(in, options);
  if (in.q.is_cuda()) {  // head dims the CUDA kernels do not take run zero-padded (padding.h)
    const auto [dk, dv] = cudaChunkDims(in.q.size(-1), in.v.size(-1));
    if (dk != in.q.size(-1) || dv != in.v.size(-1)) return recurrencePadded(in, options, dk, dv);
  }
  const variable_list outputs = RecurrenceFunction::apply(
      in.q, in.k, in.v, optionalOf(in.g), optionalOf(in.beta), optionalOf(in.u), optionalOf(in.h0),
      optionalOf(dims.cu_seqlens_host), options.kind, options.scale, options.chunk,
      options.outputFinalState);
  return {outputs[0], options.outputFinalState ? outputs[1] : torch::Tensor()};
}

RecurrenceGrads recurrenceBackward(const RecurrenceInputs& in, const RecurrenceOptions& options,
                                   const torch::Tensor& d_o, const torch::Tensor& d_ht,
                                   const RecurrenceWanted& wanted) {
  const RecurrenceDims dims = checkRecurrence(in, options);
  if (in.q.is_cuda()) {
    const auto [dk, dv] = cudaChunkDims(in.q.size(-1), in.v.size(-1));
    if (dk != in.q.size(-1) || dv != in.v.size(-1))
      checks::fail(kRecurrenceOp, "q, v", "head dims the CUDA backward takes unpadded (" +
                                             std::to_string(dk) + ", " + std::to_string(dv) + ")",
                   "dk " + std::to_string(in.q.size(-1)) + ", dv " + std::to_string(in.v.size(-1)));
  }
  const torch::NoGradGuard no_grad;
  const RecurrenceInputs saved{in.q.contiguous(), in.k.contiguous(), in.v.contiguous(),
                               contiguousF32(in.g), contiguousF32(in.beta), contiguousF32(in.u),
                               contiguousOrUndefined(in.h0), dims.cu_seqlens_host};
  return RecurrenceFunction::backwardKernels(saved, options, d_o, d_ht, wanted);
}

torch::Tensor recurrenceStep(const RecurrenceInputs& in, torch::Tensor& state,
                             const RecurrenceOptions& options) {
  using namespace checks;
  constexpr std::string_view op = kStepOp;
  const RecurrenceKind kind = checkedKind(op, options.kind);
  checkScale(op, options.scale);
  expectDim(op, "q", in.q, 3);
  const int64_t batch = in.q.size(0), heads = in.q.size(1), key_dim = in.q.size(2);
  checkQkvAndGates(op, in, kind, {batch});
  const int64_t value_dim = in.v.size(2);
  expectUndefined(op, "h0", in.h0, "the decode step (the state argument holds it)");
  expectUndefined(op, "cu_seqlens", in.cu_seqlens, "the decode step");
  expectShape(op, "state", state, {batch, heads, key_dim, value_dim});
  expectDtype(op, "state", state, torch::kFloat);
  expectDevice(op, "state", state, in.q.device());
  if (!state.is_contiguous())
    fail(op, "state", "a contiguous tensor (updated in place)", "a strided one");

  const torch::NoGradGuard no_grad;
  const torch::Tensor q = in.q.contiguous(), k = in.k.contiguous(),
                      v = in.v.contiguous();          // [B, H, d]
  const torch::Tensor g = contiguousF32(in.g);        // [H] / [B, H] / [B, H, dk]
  const torch::Tensor beta = contiguousF32(in.beta);  // [B, H]
  const torch::Tensor u = contiguousF32(in.u);        // [H, dk]
  torch::Tensor o = torch::empty({batch, heads, value_dim}, v.options());  // [B, H, dv]

  kernels::RecurrenceStepArgs args;
  args.q = q.data_ptr();
  args.k = k.data_ptr();
  args.v = v.data_ptr();
  args.g = ptrOrNull<const float>(g);
  args.beta = ptrOrNull<const float>(beta);
  args.u = ptrOrNull<const float>(u);
  args.scale = static_cast<float>(options.scale);
  args.state = state.data_ptr<float>();  // [B, H, dk, dv]
  args.o = o.data_ptr();
  kernels::RecurrenceShape shape;
  shape.batch = batch;
  shape.seq_len = 1;
  shape.heads = heads;
  shape.key_dim = key_dim;
  shape.value_dim = value_dim;
  shape.num_seqs = batch;
  recurrentStep(op, q.device(), kind, kernelDtype(q.scalar_type()), shape, args);
  state.unsafeGetTensorImpl()->bump_version();  // written through a raw pointer
  return o;
}

std::pair<torch::Tensor, torch::Tensor> scan(const torch::Tensor& x, const torch::Tensor& g,
                                             const torch::Tensor& h0,
                                             const torch::Tensor& cu_seqlens,
                                             bool outputFinalState) {
  using namespace checks;
  constexpr std::string_view op = kScanOp;
  expectDim(op, "x", x, 3);
  expectKernelDtype(op, "x", x);
  expectSupportedDevice(op, "x", x);
  for (int64_t d : x.sizes()) {
    if (d < 1) fail(op, "x", "non-empty dimensions", describe(x));
  }
  expectShape(op, "g", g, x.sizes());
  expectFloating(op, "g", g);
  expectDevice(op, "g", g, x.device());
  const torch::Tensor cu_host = checkCuSeqlens(op, cu_seqlens, x.size(0), x.size(1), x.device());
  const int64_t num_seqs = cu_host.defined() ? cu_host.numel() - 1 : x.size(0);
  if (h0.defined()) {
    expectShape(op, "h0", h0, {num_seqs, x.size(2)});
    expectDtype(op, "h0", h0, torch::kFloat);
    expectDevice(op, "h0", h0, x.device());
  }
  const variable_list outputs =
      ScanFunction::apply(x, g, optionalOf(h0), optionalOf(cu_host), outputFinalState);
  return {outputs[0], outputFinalState ? outputs[1] : torch::Tensor()};
}

}  // namespace linac::ops
