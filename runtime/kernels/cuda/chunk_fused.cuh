// The chunk forward with a variant's prologue computed in the kernel: generated code
// (generated/<variant>/<variant>_cuda.cu) defines a Roles policy (chunk_roles.cuh) from its spec
// and calls launchFusedChunkForward<Roles>, which checks the arguments and instantiates the
// forward skeleton for the policy's kind, over dtype (fp32, bf16) and key dim (64, 128, 256).
#pragma once

#include "chunk_forward_inst.cuh"
#include "cuda_check.h"

#include <cuda_bf16.h>

#include <string>

namespace linac::kernels::cuda {

namespace fused_detail {

template <class Roles, typename T>
void launch(const FusedForwardArgs& a, int num_seqs, cudaStream_t stream) {
  constexpr RecurrenceKind kind = Roles::kKind;
  constexpr bool delta = kind.update == UpdateRule::Delta;
  constexpr bool diag = kind.decay == DecayClass::Diagonal;
  ChunkFwdParams<T> p =
      chunkFwdParams<T>(kind, a.shape, a.q, a.k, a.v, a.u, a.h0, a.o, a.ht, a.scale);
  p.qRole = a.qRole;
  p.kRole = a.kRole;
  p.decayRole = a.decay;
  p.betaRole = a.beta;
  switch (a.shape.key_dim) {
    case 64: launchChunkForwardT<T, 64, delta, diag, Roles>(p, num_seqs, stream); break;
    case 128: launchChunkForwardT<T, 128, delta, diag, Roles>(p, num_seqs, stream); break;
    case 256: launchChunkForwardT<T, 256, delta, diag, Roles>(p, num_seqs, stream); break;
    default:
      LINAC_REQUIRE(false, "fused chunk forward: key_dim must be 64, 128 or 256, got " +
                               std::to_string(a.shape.key_dim));
  }
}

/// Every operand a computed role reads is present.
inline bool complete(const RoleOperands& role) {
  if (role.count <= 0 || role.count > kMaxRoleOperands) return false;
  for (int j = 0; j < role.count; ++j)
    if (!role.operands[j].data) return false;
  return true;
}

}  // namespace fused_detail

template <class Roles>
void launchFusedChunkForward(const FusedForwardArgs& a, cudaStream_t stream) {
  constexpr RecurrenceKind kind = Roles::kKind;
  LINAC_REQUIRE(a.v && a.o, "fused chunk forward: v and o are required");
  LINAC_REQUIRE(Roles::kComputeQ ? fused_detail::complete(a.qRole) : a.q != nullptr,
                "fused chunk forward: q needs its tile or its operands");
  LINAC_REQUIRE(Roles::kComputeK ? fused_detail::complete(a.kRole) : a.k != nullptr,
                "fused chunk forward: k needs its tile or its operands");
  LINAC_REQUIRE(kind.decay == DecayClass::None || !Roles::kComputeDecay ||
                    fused_detail::complete(a.decay),
                "fused chunk forward: the decay needs its operands");
  LINAC_REQUIRE(kind.update != UpdateRule::Delta || !Roles::kComputeBeta ||
                    fused_detail::complete(a.beta),
                "fused chunk forward: beta needs its operands");
  LINAC_REQUIRE(kind.readout != Readout::ExclusiveBonus || a.u,
                "fused chunk forward: exclusive_bonus needs u");
  const int64_t num_seqs = checkedNumSeqs(a.shape, "fused chunk forward");
  if (num_seqs == 0) return;
  switch (a.dtype) {
    case DType::F32: fused_detail::launch<Roles, float>(a, int(num_seqs), stream); break;
    case DType::BF16: fused_detail::launch<Roles, __nv_bfloat16>(a, int(num_seqs), stream); break;
    case DType::F16:
      LINAC_REQUIRE(false, "fused chunk forward: fp16 is not instantiated (fp32 and bf16 are); "
                           "fp16 runs composed");
  }
}

}  // namespace linac::kernels::cuda
