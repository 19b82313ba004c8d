// Decode step (T = 1): the token-level recurrence of DESIGN.md section 3 for B sequences.
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "head_inputs.h"
#include "token_step.h"

namespace linac::kernels::cpu {

void recurrentStep(const RecurrenceKind& kind, int64_t batch, int64_t heads, int64_t dk, int64_t dv,
                   const RecurrenceStepArgs& args, DType dtype) {
  const std::string where = "linac::kernels::cpu::recurrentStep: ";
  if (batch <= 0 || heads <= 0 || dk <= 0 || dv <= 0)
    throw std::invalid_argument(where + "batch, heads, dk and dv must be positive");
  if (!args.q || !args.k || !args.v || !args.state || !args.o)
    throw std::invalid_argument(where + "q, k, v, state and o must be non-null");
  if (kind.decay != DecayClass::None && !args.g)
    throw std::invalid_argument(where + "this decay class needs g (log-decay), got null");
  if (kind.update == UpdateRule::Delta && !args.beta)
    throw std::invalid_argument(where + "the delta rule needs beta");
  if (kind.readout == Readout::ExclusiveBonus && !args.u)
    throw std::invalid_argument(where + "the exclusive_bonus readout needs u");

  parallelFor(batch * heads, [&](int64_t row) {  // row = b * H + h
    const int64_t h = row % heads;
    std::vector<float> q(dk), k(dk), v(dv), g(dk, 0.0f), out(dv), scratch(dv);
    for (int64_t c = 0; c < dk; ++c) {
      q[c] = loadElement(args.q, row * dk + c, dtype);
      k[c] = loadElement(args.k, row * dk + c, dtype);
    }
    for (int64_t e = 0; e < dv; ++e) v[e] = loadElement(args.v, row * dv + e, dtype);
    int64_t channel_stride = 0;
    switch (kind.decay) {
      case DecayClass::None: break;
      case DecayClass::Fixed: g[0] = args.g[h]; break;            // [H]
      case DecayClass::Scalar: g[0] = args.g[row]; break;        // [B, H]
      case DecayClass::Diagonal:                                 // [B, H, dk]
        std::copy_n(args.g + row * dk, dk, g.begin());
        channel_stride = 1;
        break;
    }
    const float beta = kind.update == UpdateRule::Delta ? args.beta[row] : 0.0f;
    const float* u = kind.readout == Readout::ExclusiveBonus ? args.u + h * dk : nullptr;
    tokenStep(kind, args.state + row * dk * dv, dk, dv, q.data(), k.data(), v.data(), g.data(),
              channel_stride, beta, u, args.scale, out.data(), scratch.data());
    for (int64_t e = 0; e < dv; ++e) storeElement(args.o, row * dv + e, dtype, out[e]);
  });
}

}  // namespace linac::kernels::cpu
