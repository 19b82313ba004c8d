#include "head_inputs.h"

#include "thread_pool.h"

#include <algorithm>
#include <stdexcept>

namespace linac::kernels::cpu {

namespace {

[[noreturn]] void fail(const char* where, const std::string& what) {
  throw std::invalid_argument(std::string(where) + ": " + what);
}

}  // namespace

int64_t numSequences(const RecurrenceShape& shape) {
  return shape.cu_seqlens ? shape.num_seqs : shape.batch;
}

HeadSlice headSlice(const RecurrenceShape& shape, int64_t sequence, int64_t head) {
  HeadSlice slice;
  slice.heads = shape.heads;
  slice.head = head;
  if (shape.cu_seqlens) {
    slice.first_token = shape.cu_seqlens[sequence];
    slice.length = shape.cu_seqlens[sequence + 1] - shape.cu_seqlens[sequence];
  } else {
    slice.first_token = sequence * shape.seq_len;
    slice.length = shape.seq_len;
  }
  return slice;
}

void validateRecurrence(const char* where, const RecurrenceKind& kind,
                        const RecurrenceShape& shape, const RecurrenceForwardArgs& args, int chunk) {
  if (shape.batch <= 0 || shape.seq_len < 0 || shape.heads <= 0 || shape.key_dim <= 0 ||
      shape.value_dim <= 0)
    fail(where, "batch, heads, key_dim and value_dim must be positive and seq_len >= 0");
  if (chunk <= 0) fail(where, "chunk size must be positive, got " + std::to_string(chunk));
  if (shape.cu_seqlens) {
    if (shape.batch != 1)
      fail(where, "cu_seqlens (packed varlen) requires batch == 1, got " +
                      std::to_string(shape.batch));
    if (shape.num_seqs <= 0) fail(where, "cu_seqlens given but num_seqs <= 0");
    if (shape.cu_seqlens[0] != 0) fail(where, "cu_seqlens[0] must be 0");
    for (int64_t n = 0; n < shape.num_seqs; ++n)
      if (shape.cu_seqlens[n + 1] < shape.cu_seqlens[n])
        fail(where, "cu_seqlens must be non-decreasing (at index " + std::to_string(n + 1) + ")");
    if (shape.cu_seqlens[shape.num_seqs] != shape.seq_len)
      fail(where, "cu_seqlens[num_seqs] = " + std::to_string(shape.cu_seqlens[shape.num_seqs]) +
                      " but seq_len = " + std::to_string(shape.seq_len));
  }
  if (!args.q || !args.k || !args.v) fail(where, "q, k and v must be non-null");
  if (kind.decay != DecayClass::None && !args.g)
    fail(where, "this decay class needs g (log-decay), got null");
  if (kind.update == UpdateRule::Delta && !args.beta) fail(where, "the delta rule needs beta");
  if (kind.readout == Readout::ExclusiveBonus && !args.u)
    fail(where, "the exclusive_bonus readout needs u");
  const int decay = static_cast<int>(kind.decay);
  if (decay < 0 || decay > 3) fail(where, "unknown decay class " + std::to_string(decay));
}

HeadInputs loadHeadInputs(const RecurrenceKind& kind, const RecurrenceShape& shape,
                          const RecurrenceForwardArgs& args, DType dtype, int64_t sequence,
                          int64_t head) {
  HeadInputs in;
  in.slice = headSlice(shape, sequence, head);
  in.sequence = sequence;
  in.key_dim = shape.key_dim;
  in.value_dim = shape.value_dim;
  const int64_t len = in.slice.length, dk = shape.key_dim, dv = shape.value_dim;
  in.q.resize(len * dk);
  in.k.resize(len * dk);
  in.v.resize(len * dv);
  loadRows(args.q, dtype, in.slice, dk, in.q.data());
  loadRows(args.k, dtype, in.slice, dk, in.k.data());
  loadRows(args.v, dtype, in.slice, dv, in.v.data());

  in.decay_width = kind.decay == DecayClass::Diagonal ? dk : 1;
  in.channel_stride = kind.decay == DecayClass::Diagonal ? 1 : 0;
  in.g.assign(len * in.decay_width, 0.0f);
  switch (kind.decay) {
    case DecayClass::None: break;
    case DecayClass::Fixed: std::fill(in.g.begin(), in.g.end(), args.g[head]); break;
    case DecayClass::Scalar:
      for (int64_t t = 0; t < len; ++t) in.g[t] = args.g[in.slice.row(t)];
      break;
    case DecayClass::Diagonal:
      for (int64_t t = 0; t < len; ++t)
        std::copy_n(args.g + in.slice.row(t) * dk, dk, in.g.begin() + t * dk);
      break;
  }
  if (kind.update == UpdateRule::Delta) {
    in.beta.resize(len);
    for (int64_t t = 0; t < len; ++t) in.beta[t] = args.beta[in.slice.row(t)];
  }
  if (kind.readout == Readout::ExclusiveBonus) in.u = args.u + head * dk;
  in.h0.assign(dk * dv, 0.0f);
  if (args.h0) std::copy_n(args.h0 + (sequence * shape.heads + head) * dk * dv, dk * dv, in.h0.begin());
  return in;
}

void parallelFor(int64_t count, const std::function<void(int64_t)>& body) {
  cpuThreadPool()->run(count, body);
}

}  // namespace linac::kernels::cpu
