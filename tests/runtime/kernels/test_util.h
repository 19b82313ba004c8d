// Shared machinery of the CPU kernel tests: random realistic inputs, running the CPU kernels and
// the float64 oracle on the same inputs, and the relative-RMS gate of DESIGN.md section 4.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "kernels/common/recurrence.h"

namespace linac::test {

using kernels::DecayClass;
using kernels::DType;
using kernels::Readout;
using kernels::RecurrenceKind;
using kernels::UpdateRule;

/// Relative RMS gates (DESIGN.md section 4).
inline constexpr double kTolF32 = 1e-5;
/// The fixed decay class's dg is a per-head total with heavy cancellation (see expectClose).
inline constexpr double kFixedDecayGradTol = 1e-4;
inline constexpr double kTolHalf = 5e-3;  // bf16 and fp16 inputs
inline double toleranceFor(DType dtype) { return dtype == DType::F32 ? kTolF32 : kTolHalf; }

/// A fresh seed per run (std::random_device); tests print it on failure through SCOPED_TRACE.
uint32_t freshSeed();

std::string kindName(const RecurrenceKind& kind);
std::string dtypeName(DType dtype);
torch::ScalarType torchType(DType dtype);
/// All 16 combinations decay x update x readout.
std::vector<RecurrenceKind> allKinds();

struct RecurrenceCase {
  RecurrenceKind kind;
  DType dtype = DType::F32;
  int64_t batch = 2, seq_len = 100, heads = 2, key_dim = 48, value_dim = 64;
  int chunk = 32;
  std::vector<int64_t> cu_seqlens;  // non-empty: packed varlen, batch must be 1
  bool with_h0 = true;
  bool with_d_ht = true;
  double min_log_decay = -5.0;      // g = max(logsigmoid(N(0,1)) * decay_strength, min_log_decay)
  double decay_strength = 1.0;
  int64_t numSeqs() const { return cu_seqlens.empty() ? batch : int64_t(cu_seqlens.size()) - 1; }
};

/// Kernel-side inputs: q, k, v, d_o in the case's dtype; g, beta, u, h0, d_ht fp32. Unused ones
/// are undefined tensors.
struct RecurrenceData {
  torch::Tensor q, k, v, g, beta, u, h0, d_o, d_ht;
  double scale = 1.0;
};
RecurrenceData makeRecurrenceData(const RecurrenceCase& c, uint32_t seed);

/// Outputs and gradients, all float64 (undefined when the kind has no such tensor).
struct RecurrenceResult {
  torch::Tensor o, ht, dq, dk, dv, dg, dbeta, du, dh0;
};
RecurrenceResult runCpuKernels(const RecurrenceCase& c, const RecurrenceData& d);
RecurrenceResult runOracle(const RecurrenceCase& c, const RecurrenceData& d);
/// Forward only through the CPU kernels (o, ht).
RecurrenceResult runCpuForward(const RecurrenceCase& c, const RecurrenceData& d);

/// ||x - ref|| / ||ref|| (absolute norm when ref is exactly zero).
double relRms(const torch::Tensor& x, const torch::Tensor& ref);

/// EXPECTs every tensor of `got` that `ref` defines to be within `tol`; records the errors under
/// `dtype` for the summary printed at the end of the run.
void expectClose(const RecurrenceResult& got, const RecurrenceResult& ref, double tol, DType dtype);
/// Records one measured error for the end-of-run summary (max per dtype and tensor).
void recordError(DType dtype, const std::string& tensor, double error);

}  // namespace linac::test
