// HGRN vector scan h_t = exp(g_t) * h_{t-1} + x_t (elementwise over D channels) and its backward.
//
// Channels are independent, so on a CPU the scan is a sequential fp32 loop per (sequence,
// channel block); work is spread over sequences x channel blocks. The backward is the reverse
// scan of the adjoint  a_t = d_h_t + exp(g_{t+1}) a_{t+1}  (a_{T} seeded by d_ht), giving
//   d_x_t = a_t,   d_g_t = a_t * exp(g_t) * h_{t-1},   d_h0 = exp(g_0) a_0.
// The forward states h_{t-1} are recomputed in fp32 (the stored h may be bf16).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "head_inputs.h"

namespace linac::kernels::cpu {

namespace {

/// Channels handled by one task: enough work per thread, few enough tasks to balance.
constexpr int64_t kScanChannelBlock = 64;

struct ScanSequence {
  int64_t first_token = 0, length = 0;
};

int64_t scanSequences(const ScanShape& shape) {
  return shape.cu_seqlens ? shape.num_seqs : shape.batch;
}

ScanSequence scanSequence(const ScanShape& shape, int64_t n) {
  if (shape.cu_seqlens) return {shape.cu_seqlens[n], shape.cu_seqlens[n + 1] - shape.cu_seqlens[n]};
  return {n * shape.seq_len, shape.seq_len};
}

void validateScan(const char* where, const ScanShape& shape, const ScanForwardArgs& args) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument(std::string(where) + ": " + what);
  };
  if (shape.batch <= 0 || shape.seq_len < 0 || shape.channels <= 0)
    fail("batch and channels must be positive and seq_len >= 0");
  if (!args.x || !args.g) fail("x and g must be non-null");
  if (shape.cu_seqlens) {
    if (shape.batch != 1) fail("cu_seqlens (packed varlen) requires batch == 1");
    if (shape.num_seqs <= 0 || shape.cu_seqlens[0] != 0) fail("cu_seqlens must start at 0, num_seqs > 0");
    for (int64_t n = 0; n < shape.num_seqs; ++n)
      if (shape.cu_seqlens[n + 1] < shape.cu_seqlens[n]) fail("cu_seqlens must be non-decreasing");
    if (shape.cu_seqlens[shape.num_seqs] != shape.seq_len) fail("cu_seqlens[num_seqs] != seq_len");
  }
}

/// Runs body(sequence, first_channel, channel_count) over all sequences x channel blocks.
template <typename Body>
void forEachBlock(const ScanShape& shape, Body body) {
  const int64_t blocks = (shape.channels + kScanChannelBlock - 1) / kScanChannelBlock;
  parallelFor(scanSequences(shape) * blocks, [&](int64_t task) {
    const int64_t n = task / blocks, first = (task % blocks) * kScanChannelBlock;
    body(n, first, std::min(kScanChannelBlock, shape.channels - first));
  });
}

}  // namespace

void scanForward(const ScanShape& shape, const ScanForwardArgs& args, DType dtype) {
  validateScan("linac::kernels::cpu::scanForward", shape, args);
  if (!args.h) throw std::invalid_argument("linac::kernels::cpu::scanForward: h must be non-null");
  const int64_t D = shape.channels;
  forEachBlock(shape, [&](int64_t n, int64_t first, int64_t count) {
    const ScanSequence seq = scanSequence(shape, n);
    std::vector<float> h(count, 0.0f);
    if (args.h0) std::copy_n(args.h0 + n * D + first, count, h.begin());
    for (int64_t t = 0; t < seq.length; ++t) {
      const int64_t base = (seq.first_token + t) * D + first;
      for (int64_t c = 0; c < count; ++c) {
        h[c] = std::exp(args.g[base + c]) * h[c] + loadElement(args.x, base + c, dtype);
        storeElement(args.h, base + c, dtype, h[c]);
      }
    }
    if (args.ht) std::copy(h.begin(), h.end(), args.ht + n * D + first);
  });
}

void scanBackward(const ScanShape& shape, const ScanBackwardArgs& args, DType dtype) {
  validateScan("linac::kernels::cpu::scanBackward", shape, args.fwd);
  if (!args.d_h) throw std::invalid_argument("linac::kernels::cpu::scanBackward: d_h must be non-null");
  const int64_t D = shape.channels;
  forEachBlock(shape, [&](int64_t n, int64_t first, int64_t count) {
    const ScanSequence seq = scanSequence(shape, n);
    // Recompute h_{-1} .. h_{T-1} in fp32: states[(t + 1) * count + c] = h_t.
    std::vector<float> states((seq.length + 1) * count, 0.0f);
    if (args.fwd.h0) std::copy_n(args.fwd.h0 + n * D + first, count, states.begin());
    for (int64_t t = 0; t < seq.length; ++t) {
      const int64_t base = (seq.first_token + t) * D + first;
      for (int64_t c = 0; c < count; ++c)
        states[(t + 1) * count + c] = std::exp(args.fwd.g[base + c]) * states[t * count + c] +
                                      loadElement(args.fwd.x, base + c, dtype);
    }
    std::vector<float> adjoint(count, 0.0f);  // d loss / d h_t, seeded by d_ht
    if (args.d_ht) std::copy_n(args.d_ht + n * D + first, count, adjoint.begin());
    for (int64_t t = seq.length - 1; t >= 0; --t) {
      const int64_t base = (seq.first_token + t) * D + first;
      for (int64_t c = 0; c < count; ++c) {
        const float a = adjoint[c] + loadElement(args.d_h, base + c, dtype);
        const float lambda = std::exp(args.fwd.g[base + c]);
        if (args.d_x) storeElement(args.d_x, base + c, dtype, a);
        if (args.d_g) args.d_g[base + c] = a * lambda * states[t * count + c];
        adjoint[c] = lambda * a;  // flows to h_{t-1}
      }
    }
    if (args.d_h0) std::copy(adjoint.begin(), adjoint.end(), args.d_h0 + n * D + first);
  });
}

}  // namespace linac::kernels::cpu
