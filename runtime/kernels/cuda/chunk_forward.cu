// chunkForward: argument checks, then the Hopper stages where they take the call (hopper/), else
// dispatch over element type to the per-type instantiations of the mma.sync skeleton.
#include "chunk_forward.cuh"
#include "cuda_check.h"
#include "cuda_kernels.h"

#ifdef LINAC_HAVE_HOPPER
#include "hopper/hopper_forward.h"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

namespace linac::kernels::cuda {

template <typename T>
void launchChunkForward(const ChunkFwdParams<T>& p, int key_dim, bool delta, bool diag,
                        int num_seqs, cudaStream_t stream);
extern template void launchChunkForward<float>(const ChunkFwdParams<float>&, int, bool, bool, int,
                                               cudaStream_t);
extern template void launchChunkForward<__nv_bfloat16>(const ChunkFwdParams<__nv_bfloat16>&, int,
                                                       bool, bool, int, cudaStream_t);
extern template void launchChunkForward<__half>(const ChunkFwdParams<__half>&, int, bool, bool,
                                                int, cudaStream_t);

namespace {
template <typename T>
void run(const RecurrenceKind& kind, const RecurrenceShape& s, const RecurrenceForwardArgs& a,
         int num_seqs, cudaStream_t stream) {
  ChunkFwdParams<T> p = chunkFwdParams<T>(kind, s, a.q, a.k, a.v, a.u, a.h0, a.o, a.ht, a.scale);
  p.g = a.g;
  p.beta = a.beta;
  launchChunkForward<T>(p, int(s.key_dim), kind.update == UpdateRule::Delta,
                        kind.decay == DecayClass::Diagonal, num_seqs, stream);
}
}  // namespace

void chunkForward(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape,
                  const RecurrenceForwardArgs& args, cudaStream_t stream) {
  LINAC_REQUIRE(args.q && args.k && args.v && args.o, "chunkForward: q, k, v, o are required");
  LINAC_REQUIRE(kind.decay == DecayClass::None || args.g,
                "chunkForward: decay class needs g (log-decay)");
  LINAC_REQUIRE(kind.update != UpdateRule::Delta || args.beta, "chunkForward: delta needs beta");
  LINAC_REQUIRE(kind.readout != Readout::ExclusiveBonus || args.u,
                "chunkForward: exclusive_bonus needs u");
  const int64_t num_seqs = checkedNumSeqs(shape, "chunkForward");
  if (num_seqs == 0) return;
#ifdef LINAC_HAVE_HOPPER
  if (hopper::tensorMapAligned({args.q, args.k, args.v}) && hopper::forwardSupported(kind, dtype, shape)) {
    hopper::forward(kind, dtype, shape, args, num_seqs, stream);
    return;
  }
#endif
  switch (dtype) {
    case DType::F32: run<float>(kind, shape, args, int(num_seqs), stream); break;
    case DType::BF16: run<__nv_bfloat16>(kind, shape, args, int(num_seqs), stream); break;
    case DType::F16: run<__half>(kind, shape, args, int(num_seqs), stream); break;
  }
}

bool chunkForwardOnHopper(const RecurrenceKind& kind, DType dtype, const RecurrenceShape& shape) {
#ifdef LINAC_HAVE_HOPPER
  return hopper::forwardSupported(kind, dtype, shape);
#else
  (void)kind, (void)dtype, (void)shape;
  return false;
#endif
}

// chunkBackward lives in chunk_backward.cu.

}  // namespace linac::kernels::cuda
