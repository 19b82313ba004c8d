// Host launchers of linac's CUDA kernel skeletons. They mirror the CPU entry points
// (runtime/kernels/cpu/cpu_kernels.h) with the element type explicit and a cudaStream_t; every
// pointer in the argument structs is a device pointer (cu_seqlens included). Launches are
// asynchronous on `stream`; launch and argument errors throw std::runtime_error /
// std::invalid_argument naming file:line (no exit() anywhere).
#pragma once

#include "../common/recurrence.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace linac::kernels::cuda {

/// Chunkwise forward (recurrence.h semantics): writes args.o [B, T, H, dv] and, when non-null,
/// args.ht [N, H, dk, dv]. Any DecayClass x UpdateRule x Readout. dk in {64, 128, 256},
/// dv a multiple of 64 (32 where the value block is 32), dtype bf16 / fp16 / fp32.
void chunkForward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                  const RecurrenceForwardArgs& args, cudaStream_t stream);

/// Whether chunkForward runs this call on the Hopper stages (hopper/: an sm_90 device, sm_90a code
/// in the build, a kind, element type and shape they take), its fastest path where it applies.
bool chunkForwardOnHopper(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape);

/// Chunkwise backward (chunk_backward.cu): exact, writes every non-null gradient. dk in
/// {64, 128, 256}, dv a multiple of 16. Takes its workspace from workspace.h's allocator, on `stream`.
void chunkBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                   const RecurrenceBackwardArgs& args, cudaStream_t stream);

/// Null when chunkBackward's path for these arguments writes every gradient once in a fixed order
/// (the same inputs give the same bits), else what sums with float atomics, for torch's
/// deterministic mode to name (ops: at::globalContext().alertNotDeterministic).
const char* chunkBackwardAtomics(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                                 const RecurrenceBackwardArgs& args);

/// One decode step for shape.batch sequences (shape.seq_len ignored): state updated in place,
/// o written. Any kind; dk <= 256; any dv.
void recurrentStep(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                   const RecurrenceStepArgs& args, cudaStream_t stream);

/// HGRN vector scan forward: h [B, T, D] and optionally ht [N, D].
void scanForward(DType dtype, const ScanShape& shape, const ScanForwardArgs& args,
                 cudaStream_t stream);

/// HGRN vector scan backward: d_x, d_g, d_h0; any may be null (h_{t-1} is recomputed in fp32).
void scanBackward(DType dtype, const ScanShape& shape, const ScanBackwardArgs& args,
                  cudaStream_t stream);

/// The activation applied after the short convolution (runtime::Activation's values, in its order).
enum class ShortConvActivation : int { None = 0, Silu, Sigmoid, Relu, Tanh, Elu1 };
/// The widest short convolution the kernels take (fla uses 4).
constexpr int kShortConvMaxWidth = 8;

/// A short causal depthwise convolution over [batch, seq_len, channels] with `width` taps.
struct ShortConvShape {
  int64_t batch = 0, seqLen = 0, channels = 0;
  int width = 0;  // 1..kShortConvMaxWidth
};

struct ShortConvForwardArgs {
  const void* x = nullptr;          // [B, T, C] dtype, contiguous
  const float* weight = nullptr;    // [C, W] fp32 (torch's depthwise [C, 1, W])
  void* y = nullptr;                // [B, T, C] dtype
  const int64_t* positions = nullptr;  // [B, T] each token's offset in its packed document, or null
};

struct ShortConvBackwardArgs {
  const void* x = nullptr;       // [B, T, C] dtype, as given to the forward
  const float* weight = nullptr; // [C, W] fp32
  const void* dy = nullptr;      // [B, T, C] dtype
  void* dx = nullptr;            // [B, T, C] dtype, or null when not wanted
  float* dweight = nullptr;      // [C, W] fp32 (overwritten), or null when not wanted
  float* workspace = nullptr;    // shortConvWorkspaceFloats(shape) floats when dweight is wanted
  const int64_t* positions = nullptr;  // [B, T] as given to the forward, or null
};

/// y = act(causal depthwise conv(x, weight)) (short_conv.cu): y_t = act(sum_j w_j x_{t-W+1+j}),
/// x_{<0} = 0, accumulated in fp32. With positions (packed documents), the term of lag W-1-j
/// is taken only when W-1-j <= positions_t: no token reads an input of the document before its own.
void shortConvForward(DType dtype, ShortConvActivation activation, const ShortConvShape& shape,
                      const ShortConvForwardArgs& args, cudaStream_t stream);

/// The gradients of shortConvForward's y with respect to x and weight, from dy; the
/// pre-activation is recomputed from x. dweight is summed over batch and time in a fixed order
/// (deterministic).
void shortConvBackward(DType dtype, ShortConvActivation activation, const ShortConvShape& shape,
                       const ShortConvBackwardArgs& args, cudaStream_t stream);

/// fp32 elements of the workspace shortConvBackward needs to compute dweight.
size_t shortConvWorkspaceFloats(const ShortConvShape& shape);

/// SwiGLU's product over n elements, every pointer [n] dtype, contiguous.
struct SwigluForwardArgs {
  const void* g = nullptr;  // the gate projection
  const void* u = nullptr;  // the up projection
  void* y = nullptr;
};

struct SwigluBackwardArgs {
  const void* g = nullptr;
  const void* u = nullptr;
  const void* dy = nullptr;
  void* dg = nullptr;
  void* du = nullptr;
};

/// y = silu(g) * u (swiglu.cu), computed in fp32.
void swigluForward(DType dtype, int64_t n, const SwigluForwardArgs& args, cudaStream_t stream);

/// dg = dy u silu'(g), du = dy silu(g) (swiglu.cu), computed in fp32.
void swigluBackward(DType dtype, int64_t n, const SwigluBackwardArgs& args, cudaStream_t stream);

/// Rows of an L2 normalisation over the last dimension: x [rows, dim], contiguous.
struct L2NormShape {
  int64_t rows = 0;
  int dim = 0;
  float eps = 0.0f;  // y = x / sqrt(sum x^2 + eps)
};

struct L2NormForwardArgs {
  const void* x = nullptr;  // [rows, dim] dtype
  void* y = nullptr;        // [rows, dim] dtype
  float* r = nullptr;       // [rows] fp32: 1 / sqrt(sum x^2 + eps), kept for the backward
};

struct L2NormBackwardArgs {
  const void* x = nullptr;   // [rows, dim] dtype, as given to the forward
  const void* dy = nullptr;  // [rows, dim] dtype
  const float* r = nullptr;  // [rows] fp32, as the forward wrote it
  void* dx = nullptr;        // [rows, dim] dtype
};

/// y = x / sqrt(sum x^2 + eps) per row (l2_norm.cu), computed in fp32; writes r too.
void l2NormForward(DType dtype, const L2NormShape& shape, const L2NormForwardArgs& args, cudaStream_t stream);

/// dx = r (dy - x r^2 (x . dy)) per row (l2_norm.cu), computed in fp32.
void l2NormBackward(DType dtype, const L2NormShape& shape, const L2NormBackwardArgs& args, cudaStream_t stream);

/// Rows of an RMSNorm over the last dimension: [rows, dim], contiguous.
struct RmsNormShape {
  int64_t rows = 0;
  int dim = 0;
  float eps = 0.0f;  // y = h / sqrt(mean h^2 + eps) * w
};

/// Element types: x and h (the residual stream), the residual added to it, y and dy. The
/// supported combinations are rmsNormSupported's.
struct RmsNormTypes {
  DType x = DType::F32;
  DType residual = DType::F32;  // as y when there is no residual
  DType y = DType::F32;
};

struct RmsNormForwardArgs {
  const void* x = nullptr;         // [rows, dim] types.x
  const void* residual = nullptr;  // [rows, dim] types.residual, or null: h = x
  const float* weight = nullptr;   // [dim] fp32
  void* y = nullptr;               // [rows, dim] types.y
  void* h = nullptr;               // [rows, dim] types.x: x + residual (written exactly when residual is given)
  float* rstd = nullptr;           // [rows] fp32: 1 / sqrt(mean h^2 + eps), kept for the backward
  const void* gate = nullptr;      // [rows, dim] types.y: y is multiplied by it (fla's gated norm), or null
};

struct RmsNormBackwardArgs {
  const void* dy = nullptr;      // [rows, dim] types.y
  const void* h = nullptr;       // [rows, dim] types.x: the normalised input (x, or the forward's h)
  const float* weight = nullptr; // [dim] fp32
  const float* rstd = nullptr;   // [rows] fp32, as the forward wrote it
  const void* dhOut = nullptr;   // [rows, dim] types.x: h's gradient from its other uses, or null
  void* dx = nullptr;            // [rows, dim] types.x: the whole gradient of h (and of x)
  void* dresidual = nullptr;     // [rows, dim] types.residual: the same values, or null
  float* dweight = nullptr;      // [dim] fp32 (overwritten), or null when not wanted
  float* workspace = nullptr;    // rmsNormWorkspaceFloats(shape) floats when dweight is wanted
  const void* gate = nullptr;    // [rows, dim] types.y: the forward's gate, or null
  void* dgate = nullptr;         // [rows, dim] types.y: dy . h s w, or null (needs gate)
};

/// Whether rms_norm.cu has a kernel for these element types.
bool rmsNormSupported(const RmsNormTypes& types);

/// h = x (+ residual), y = h / sqrt(mean h^2 + eps) * w (* gate) per row (rms_norm.cu), computed
/// in fp32.
void rmsNormForward(const RmsNormTypes& types, const RmsNormShape& shape, const RmsNormForwardArgs& args,
                    cudaStream_t stream);

/// The gradients of rmsNormForward's y (and of h's other uses) with respect to x, the residual, the
/// weight and the gate; dweight summed over rows in a fixed order (deterministic).
void rmsNormBackward(const RmsNormTypes& types, const RmsNormShape& shape, const RmsNormBackwardArgs& args,
                     cudaStream_t stream);

/// fp32 elements of the workspace rmsNormBackward needs to compute dweight.
size_t rmsNormWorkspaceFloats(const RmsNormShape& shape);

/// A chunk of the LM head's logits: [rows, vocab] rows, contiguous.
struct CrossEntropyShape {
  int64_t rows = 0;
  int64_t vocab = 0;
};

struct CrossEntropyArgs {
  const void* logits = nullptr;     // [rows, vocab] dtype
  const int64_t* targets = nullptr; // [rows]; ignoreIndex rows count for nothing
  int64_t ignoreIndex = -100;
  const float* scale = nullptr;     // [] fp32: the gradient's factor (1 / scored tokens), on the device
  float* loss = nullptr;            // [rows] fp32: logsumexp - the target's logit (0 where ignored)
  void* grad = nullptr;             // [rows, vocab] dtype: (softmax - onehot) * scale; may be logits; null: none
};

/// Per-row cross-entropy of a chunk of logits and its gradient in one pass (cross_entropy.cu),
/// computed in fp32. A target outside [0, vocab) gives its row a NaN loss.
void crossEntropyForwardBackward(DType dtype, const CrossEntropyShape& shape, const CrossEntropyArgs& args,
                                 cudaStream_t stream);

}  // namespace linac::kernels::cuda
