// Tensor-core chunkwise backward for the additive update rule with a DIAGONAL decay (one log-decay
// per key channel and token: GLA, HGRN-2, RWKV-6), readout Inclusive or ExclusiveBonus, following
// fla's chunk_gla backward. Other kinds use chunk_backward.cu (exact kernel) or
// chunk_backward_additive.cu (decay None / Fixed / Scalar).
//
// Semantics (recurrence.h), per sequence n and head h, g_t in R^dk (g <= 0):
//   S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T
//   inclusive:        o_t = scale S_t^T q_t
//   exclusive_bonus:  o_t = scale (S_{t-1}^T q_t + ((q_t * u * k_t) . 1) v_t),  u [H, dk]
// Chunks of C = 64 tokens; in a chunk (local tokens t = 0..C-1; padded ones have q = k = v = d_o = 0
// and g = 0) b_t = sum_{s <= t} g_s per channel (inclusive cumsum, in double), B = b_{C-1} (= b at the
// last valid token), bq_t = b_t (inclusive) or b_{t-1} with b_{-1} = 0 (exclusive). S_c is the state
// before chunk c, dS_{c+1} the loss gradient w.r.t. the state after it (terms of later chunks and
// d_ht). Every key row of the state evolves independently (diagonal decay, additive rule).
//
// Passes, one file each (its header states the pass), with their shared pieces in
// chunk_backward_diagonal.cuh:
//   1  diagStateScanKernel (chunk_backward_diagonal_scan.cu), per (value block of 64, head x key
//      slice of 64, sequence x direction), sequential over chunks: S_c and dS_{c+1} of every
//      chunk (workspace), d_h0.
//   2  diagDqdkKernel (chunk_backward_diagonal_dqdk.cu), per (chunk, head, key slice of 64): dq,
//      dk, the chunk-local part of d_g (below), d_u partials (exclusive).
//   3  diagDvKernel (chunk_backward_diagonal_dv.cu), per (chunk, head, value block of 64): dv.
//   4  diagDuKernel (below) sums d_u.
// Passes 1-3 run as Hopper stages instead (hopper/diag_state_scan.cuh: the state passes on wgmma;
// hopper/diag_key_grad.cuh and diag_value_grad.cuh: passes 2 and 3 as one stage, the same sums
// with the 16-token factorisation on the tensor cores) for bf16 / fp16 at dk, dv in {64, 128} on an H200, the inclusive readout by
// default (hopper::diagonalGradSupported says when).
//
// d_g: dg_t = e^{g_t} <S_{t-1}, dS_t> per channel (the gradient through b), expanded over the chunk
// into straddling-pair terms only (as the additive path does for the scalar class):
//   dg_t = Z + sum_{t' >= t} X_t' + sum_{s < t} E_s  [- q_t . dq'_t  exclusive]
//   Z    = e^{B} <S_c, dS_{c+1}>              (pairs across the whole chunk, per channel)
//   X_t  = q_t . dq'_t - k_t . dk_intra_t      (dq' without the bonus term)
//   E_s  = k_s . dk_inter_s                    (dk_inter = the dS_{c+1} part of dk)
// Every term is chunk-local, so nothing is carried across chunks and the error does not grow with
// T. fla's form, dg_t = sum_{t' >= t} (q.dq - k.dk) + <ht, d_ht>, is a reverse cumsum over the whole
// sequence of nearly cancelling differences: a float32 emulation (and the H200) put its dg at
// 1.0e-5..1.6e-5 relative at dk = 256 from the products' rounding alone; this form gives ~1.5e-6.
// fp32 inputs also form X_t in double where the diagonal sub-blocks' pairs cancel, and sum in
// double (chunk_backward_diagonal_dqdk.cu; tests/runtime/cuda/diag_bwd_f32_check.py): d_w = d_g . g
// of a -exp(w) decay weighs the residue of those pairs' fp32 roundings.
//
// Numerics. b is non-increasing (g <= 0, fp32 rounding is monotone), so every exponent below is
// <= 0: strong gates (tests clamp g at -20 per token, b reaches -1280) underflow to 0, never to inf
// or NaN. The intra-chunk products split the chunk into 16-token sub-blocks: an off-diagonal pair
// factors e^{bq_t - b_s} = e^{bq_t - b_r} e^{b_r - b_s} with a reference token r between them
// (s <= r, bq_t <= b_r): r = 16 i - 1 for the dq rows of sub-block i (s < 16 i), r = 16 j + 15 for
// the dk / A rows of sub-block j (t >= 16 (j + 1)); diagonal sub-blocks are summed elementwise with
// one exponential per term, as in chunk_forward.cuh. The in-chunk cumsum is computed in the
// kernels (4 threads per channel, 16 tokens each) in double, so b = B exactly at the last token;
// pass 2 keeps b as two floats (hi = float(b), lo = float(b - hi)) and takes a difference as
// (hi_t - hi_s) + (lo_t - lo_s), exact to fp32 where it matters (with gates clamped at -20, b
// reaches -1280 in a chunk and fp32 b's alone put ~1e-5 into dg).
// Products run on tensor cores (mma.sync m16n8k8 tf32, fp32 accumulation). fp32 inputs use 3xTF32;
// bf16 / fp16 inputs use 1xTF32 (d_g's chunk-local form above needs no more).
// Every output is written by exactly one thread: deterministic, no atomics.
// Workspace (workspace.h): S and dS [slots, H, dk, dv] fp32 (the input dtype on the Hopper
// stages; slots ~ B T / C), d_u partials [slots, H, dk].
#include "chunk_backward_diagonal.cuh"
#include "chunk_backward_paths.h"
#ifdef LINAC_HAVE_HOPPER
#include "hopper/hopper_backward.h"
#endif

#include "cuda_check.h"
#include "workspace.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

namespace linac::kernels::cuda {
namespace {

using namespace diag_bwd;

// ---- pass 4: d_u reduction ------------------------------------------------------------------
/// d_u[h][c] = sum over chunk slots of the partials (zeroed where no chunk wrote), in double.
__global__ void diagDuKernel(const float* __restrict__ du_part, float* __restrict__ du,
                             int64_t slots, int H, int DK) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= H * DK) return;
  double a = 0.0;
  for (int64_t s = 0; s < slots; ++s) a += du_part[s * H * DK + i];
  du[i] = float(a);
}

// ---- host ---------------------------------------------------------------------------------------
template <typename T, int DK>
void launchDiagBwd(const RecurrenceKind& kind, const RecurrenceShape& s,
                   const RecurrenceBackwardArgs& a, int N, cudaStream_t stream) {
  // 3xTF32 where the inputs are fp32; 16-bit inputs take 1xTF32 in every pass, d_g included: its
  // chunk-local form (header) leaves no long cancelling sum for the products' rounding to grow in.
  constexpr bool kF32 = std::is_same_v<T, float>;
  constexpr bool PreciseState = kF32;  // passes 1, 2
  constexpr bool PreciseDv = kF32;     // pass 3
  const int H = int(s.heads), dv = int(s.value_dim);
  const int nks = DK / kSlice;
  const bool varlen = s.cu_seqlens != nullptr;
  const bool excl = kind.readout == Readout::ExclusiveBonus;
  const int64_t chunks_per_seq = (s.seq_len + kC - 1) / kC;
  const int64_t slots = varlen ? s.seq_len / kC + N + 1 : int64_t(N) * chunks_per_seq;
  const bool want_dg = a.d_g != nullptr;
  const bool want_du = excl && a.d_u != nullptr;
  LINAC_REQUIRE(int64_t(H) * nks <= 65535,
                "diagonalChunkBackward: heads * key_dim / 64 must be <= 65535, got " +
                    std::to_string(int64_t(H) * nks));

  // passes 1-3 on the Hopper stages (hopper/diag_state_scan.cuh, hopper/diag_key_grad.cuh) where
  // they take the call; their state workspaces hold the input dtype
  bool hopper = false;
#ifdef LINAC_HAVE_HOPPER
  DType dtype = DType::F32;
  if constexpr (!kF32) {
    dtype = std::is_same_v<T, __half> ? DType::F16 : DType::BF16;
    hopper = hopper::diagonalGradSupported(kind, dtype, s) &&
             hopper::tensorMapAligned({a.fwd.q, a.fwd.k, a.fwd.v, a.fwd.g, a.d_o});
  }
#endif

  size_t off = 0;
  auto carve = [&](size_t bytes) {
    const size_t o = off;
    off += (bytes + 255) / 256 * 256;
    return o;
  };
  const size_t state_bytes = size_t(slots) * H * DK * dv * (hopper ? sizeof(T) : sizeof(float));
  const size_t chunk_vec_bytes = size_t(slots > 0 ? slots : 1) * H * DK * sizeof(float);
  const size_t o_s = carve(state_bytes > 0 ? state_bytes : 1);
  const size_t o_ds = carve(state_bytes > 0 ? state_bytes : 1);
  const size_t o_du = want_du ? carve(chunk_vec_bytes) : 0;
  const Workspace workspace(off, stream);
  char* ws = reinterpret_cast<char*>(workspace.data());

  DiagBwdParams<T> p{};
  p.q = static_cast<const T*>(a.fwd.q);
  p.k = static_cast<const T*>(a.fwd.k);
  p.v = static_cast<const T*>(a.fwd.v);
  p.d_o = static_cast<const T*>(a.d_o);
  p.g = a.fwd.g;
  p.u = excl ? a.fwd.u : nullptr;
  p.h0 = a.fwd.h0;
  p.d_ht = a.d_ht;
  p.states = reinterpret_cast<float*>(ws + o_s);
  p.dstates = reinterpret_cast<float*>(ws + o_ds);
  p.dq = static_cast<T*>(a.d_q);
  p.dk = static_cast<T*>(a.d_k);
  p.dv = static_cast<T*>(a.d_v);
  p.dg = a.d_g;
  p.dh0 = a.d_h0;
  p.du_part = want_du ? reinterpret_cast<float*>(ws + o_du) : nullptr;
  p.cu_seqlens = s.cu_seqlens;
  p.seq_len = s.seq_len;
  p.chunks_per_seq = chunks_per_seq > 0 ? chunks_per_seq : 1;
  p.num_seqs = N;
  p.heads = H;
  p.value_dim = dv;
  p.scale = a.fwd.scale;
  p.exclusive = excl ? 1 : 0;

  if (want_du) LINAC_CUDA_CHECK(cudaMemsetAsync(p.du_part, 0, chunk_vec_bytes, stream));
#ifdef LINAC_HAVE_HOPPER
  hopper::DiagGradParams hp{};
  if (hopper) {
    hp.q = p.q;
    hp.k = p.k;
    hp.v = p.v;
    hp.d_o = p.d_o;
    hp.g = p.g;
    hp.u = p.u;
    hp.h0 = p.h0;
    hp.d_ht = p.d_ht;
    hp.dh0 = p.dh0;
    hp.states = p.states;  // sized for the input dtype above
    hp.dstates = p.dstates;
    hp.dq = p.dq;
    hp.dk = p.dk;
    hp.dv = p.dv;
    hp.dg = p.dg;
    hp.du_part = p.du_part;
    hp.cu_seqlens = p.cu_seqlens;
    hp.seq_len = p.seq_len;
    hp.chunks_per_seq = p.chunks_per_seq;
    hp.num_seqs = p.num_seqs;
    hp.heads = p.heads;
    hp.key_dim = int(s.key_dim);
    hp.value_dim = p.value_dim;
    hp.scale = p.scale;
    hp.exclusive = p.exclusive;
    hopper::diagonalStateScan(kind, dtype, s, hp, stream);
  }
#endif
  if (!hopper) launchDiagStateScan<T, DK, PreciseState>(p, stream);
#ifdef LINAC_HAVE_HOPPER
  if (hopper) hopper::diagonalGrad(kind, dtype, s, hp, slots, stream);
#endif
  if (!hopper && slots > 0 && (p.dq || p.dk || want_dg || want_du))
    launchDiagDqdk<T, DK, PreciseState>(p, slots, stream);
  if (!hopper && slots > 0 && p.dv) launchDiagDv<T, DK, PreciseDv>(p, slots, stream);
  if (want_du) {
    const int total = H * DK;
    diagDuKernel<<<(total + kReduceThreads - 1) / kReduceThreads, kReduceThreads, 0, stream>>>(
        p.du_part, a.d_u, slots, H, DK);
    LINAC_CUDA_CHECK_LAUNCH("diagDuKernel");
  }
}

template <typename T>
void dispatchKeyDim(const RecurrenceKind& kind, const RecurrenceShape& s,
                    const RecurrenceBackwardArgs& a, int N, cudaStream_t stream) {
  switch (s.key_dim) {
    case 64: launchDiagBwd<T, 64>(kind, s, a, N, stream); break;
    case 128: launchDiagBwd<T, 128>(kind, s, a, N, stream); break;
    case 256: launchDiagBwd<T, 256>(kind, s, a, N, stream); break;
    default:
      LINAC_REQUIRE(false, "diagonalChunkBackward: key_dim must be 64, 128 or 256, got " +
                               std::to_string(s.key_dim));
  }
}

}  // namespace

bool diagonalBackwardSupported(const RecurrenceKind& kind, const RecurrenceShape& shape) {
  const bool dk_ok = shape.key_dim == 64 || shape.key_dim == 128 || shape.key_dim == 256;
  return kind.decay == DecayClass::Diagonal && kind.update == UpdateRule::Additive && dk_ok &&
         shape.value_dim > 0 && shape.value_dim % kSlice == 0 &&
         shape.heads * (shape.key_dim / kSlice) <= 65535;
}

void diagonalChunkBackward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                           const RecurrenceBackwardArgs& args, int num_seqs, cudaStream_t stream) {
  LINAC_REQUIRE(diagonalBackwardSupported(kind, shape),
                "diagonalChunkBackward: unsupported kind or shape (dk " +
                    std::to_string(shape.key_dim) + ", dv " + std::to_string(shape.value_dim) + ")");
  LINAC_REQUIRE(args.fwd.g, "diagonalChunkBackward: the diagonal decay needs g [B, T, H, dk]");
  LINAC_REQUIRE(kind.readout != Readout::ExclusiveBonus || args.fwd.u,
                "diagonalChunkBackward: exclusive_bonus needs u [H, dk]");
  LINAC_REQUIRE(num_seqs > 0 && 2 * int64_t(num_seqs) <= 65535,
                "diagonalChunkBackward: grid too large (2 N must be <= 65535)");
  switch (dtype) {
    case DType::F32: dispatchKeyDim<float>(kind, shape, args, num_seqs, stream); break;
    case DType::BF16: dispatchKeyDim<__nv_bfloat16>(kind, shape, args, num_seqs, stream); break;
    case DType::F16: dispatchKeyDim<__half>(kind, shape, args, num_seqs, stream); break;
  }
}

}  // namespace linac::kernels::cuda
