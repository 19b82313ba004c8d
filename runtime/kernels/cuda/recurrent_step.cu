// Recurrent decode step (T = 1) for every recurrence kind, fp32 state updated in place.
// One thread per state column j (value channel), one CTA per (value block, head, sequence);
// q, k, per-channel decays and u are staged in shared memory. The state is read/written coalesced
// (consecutive threads, consecutive j). Delta reads its state column twice (k^T Lambda S first).
#include "cuda_check.h"
#include "cuda_kernels.h"
#include "tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace linac::kernels::cuda {
namespace {

constexpr int kStepThreads = 128;
constexpr int kMaxStepDk = 256;

template <typename T>
__global__ void __launch_bounds__(kStepThreads) recurrentStepKernel(
    const T* __restrict__ q,        // [B, H, dk]
    const T* __restrict__ k,        // [B, H, dk]
    const T* __restrict__ v,        // [B, H, dv]
    const float* __restrict__ g,    // Fixed [H], Scalar [B, H], Diagonal [B, H, dk], or null
    const float* __restrict__ beta, // [B, H] (delta)
    const float* __restrict__ u,    // [H, dk] (exclusive_bonus)
    float* __restrict__ state,      // [B, H, dk, dv]
    T* __restrict__ o,              // [B, H, dv]
    int H, int dk, int dv, float scale, int decay, int delta, int exclusive) {
  using tile::toF32;
  __shared__ float sq[kMaxStepDk], sk[kMaxStepDk], slam[kMaxStepDk];
  __shared__ float sbonus;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = int64_t(b) * H + h;
  for (int c = threadIdx.x; c < dk; c += blockDim.x) {
    sq[c] = toF32<T>(q[bh * dk + c]);
    sk[c] = toF32<T>(k[bh * dk + c]);
    float gc = 0.f;
    if (decay == int(DecayClass::Fixed)) gc = g[h];
    else if (decay == int(DecayClass::Scalar)) gc = g[bh];
    else if (decay == int(DecayClass::Diagonal)) gc = g[bh * dk + c];
    slam[c] = expf(gc);
  }
  __syncthreads();
  if (exclusive && threadIdx.x < 32) {
    float acc = 0.f;
    for (int c = threadIdx.x; c < dk; c += 32) acc += sq[c] * u[int64_t(h) * dk + c] * sk[c];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (threadIdx.x == 0) sbonus = acc;
  }
  __syncthreads();
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= dv) return;
  float* S = state + bh * dk * dv + j;  // column j, row stride dv
  const float vj = toF32<T>(v[bh * dv + j]);
  float kv = vj;  // the value written into the state: v (additive) or beta (v - k^T Lambda S)
  if (delta) {
    float ks = 0.f;
    for (int c = 0; c < dk; ++c) ks += sk[c] * slam[c] * S[int64_t(c) * dv];
    kv = beta[bh] * (vj - ks);
  }
  float acc = 0.f;
  for (int c = 0; c < dk; ++c) {
    const float s_old = S[int64_t(c) * dv];
    const float s_new = slam[c] * s_old + sk[c] * kv;
    S[int64_t(c) * dv] = s_new;
    acc += sq[c] * (exclusive ? s_old : s_new);
  }
  if (exclusive) acc += sbonus * vj;
  o[bh * dv + j] = tile::fromF32<T>(scale * acc);
}

template <typename T>
void launchStep(const RecurrenceKind& kind, const RecurrenceShape& s, const RecurrenceStepArgs& a,
                cudaStream_t stream) {
  const dim3 grid(unsigned((s.value_dim + kStepThreads - 1) / kStepThreads), unsigned(s.heads),
                  unsigned(s.batch));
  recurrentStepKernel<T><<<grid, kStepThreads, 0, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.g,
      a.beta, a.u, a.state, static_cast<T*>(a.o), int(s.heads), int(s.key_dim), int(s.value_dim),
      a.scale, int(kind.decay), kind.update == UpdateRule::Delta ? 1 : 0,
      kind.readout == Readout::ExclusiveBonus ? 1 : 0);
  LINAC_CUDA_CHECK_LAUNCH("recurrentStepKernel");
}

}  // namespace

void recurrentStep(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                   const RecurrenceStepArgs& args, cudaStream_t stream) {
  LINAC_REQUIRE(args.q && args.k && args.v && args.o && args.state,
                "recurrentStep: q, k, v, o, state are required");
  LINAC_REQUIRE(shape.key_dim > 0 && shape.key_dim <= kMaxStepDk,
                "recurrentStep: key_dim must be in [1, 256]");
  LINAC_REQUIRE(kind.decay == DecayClass::None || args.g, "recurrentStep: decay needs g");
  LINAC_REQUIRE(kind.update != UpdateRule::Delta || args.beta, "recurrentStep: delta needs beta");
  LINAC_REQUIRE(kind.readout != Readout::ExclusiveBonus || args.u,
                "recurrentStep: exclusive_bonus needs u");
  if (shape.batch == 0) return;
  switch (dtype) {
    case DType::F32: launchStep<float>(kind, shape, args, stream); break;
    case DType::BF16: launchStep<__nv_bfloat16>(kind, shape, args, stream); break;
    case DType::F16: launchStep<__half>(kind, shape, args, stream); break;
  }
}

}  // namespace linac::kernels::cuda
