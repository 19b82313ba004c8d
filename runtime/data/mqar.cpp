// Zoology's multi-query associative recall (Arora et al., 2023, zoology/data/associative_recall.py)
// with a portable RNG, so a seed gives the same batch everywhere. One difference: query slots are
// uniform over the remainder's even offsets (Zoology draws gaps from a power law near 0).
// Also MQAR as an endless, resumable training stream (`linac train --task mqar`).
#include "data/data.h"

#include <numeric>

#include "data/rng.h"

namespace linac::data {
namespace {

void checkMqar(int64_t batch, int64_t seqLen, int64_t pairs, int64_t vocab) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("mqar(batch " + std::to_string(batch) + ", seqLen " + std::to_string(seqLen) +
                                ", pairs " + std::to_string(pairs) + ", vocab " + std::to_string(vocab) +
                                "): " + why);
  };
  if (batch < 1) fail("batch must be >= 1");
  if (pairs < 1) fail("pairs must be >= 1");
  if (seqLen < 4 * pairs)
    fail("seqLen must be >= 4 * pairs (the key-value pairs plus a query slot pair each)");
  if (pairs > vocab / 2 - 1)
    fail("vocab must be >= 2 * (pairs + 1) (keys come from [1, vocab/2), values from [vocab/2, vocab))");
}

class MqarStream final : public TokenStream {
 public:
  MqarStream(int64_t seqLen, int64_t pairs, int64_t vocab, uint64_t seed)
      : seqLen_(seqLen), pairs_(pairs), vocab_(vocab), seed_(seed) {
    checkMqar(1, seqLen, pairs, vocab);
  }

  torch::Tensor next(int64_t batch) override {
    MqarBatch m = makeMqar(batch, seqLen_, pairs_, vocab_, seed_, position_);
    position_ += batch;
    return torch::stack({m.inputs, m.targets}, 1);  // [batch, 2, seqLen]
  }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override {
    if (position < 0)
      throw std::invalid_argument("mqar stream: position must be >= 0, got " + std::to_string(position));
    position_ = position;
  }
  int64_t tokensPerEpoch() const override { return 0; }

 private:
  int64_t seqLen_, pairs_, vocab_;
  uint64_t seed_;
  int64_t position_ = 0;  // examples handed out so far
};

}  // namespace

MqarBatch makeMqar(int64_t batch, int64_t seqLen, int64_t pairs, int64_t vocab, uint64_t seed,
                   int64_t firstExample) {
  checkMqar(batch, seqLen, pairs, vocab);
  if (firstExample < 0)
    throw std::invalid_argument("mqar: firstExample must be >= 0, got " + std::to_string(firstExample));
  const int64_t half = vocab / 2;

  MqarBatch out;
  out.inputs = torch::empty({batch, seqLen}, torch::kLong);                 // [batch, seqLen]
  out.targets = torch::full({batch, seqLen}, kIgnoreTarget, torch::kLong);  // [batch, seqLen]
  int64_t* inputs = out.inputs.data_ptr<int64_t>();
  int64_t* targets = out.targets.data_ptr<int64_t>();

  const int64_t context = 2 * pairs;             // k1 v1 ... kP vP
  const int64_t slots = (seqLen - context) / 2;  // query positions context + 2 * s, s < slots
  std::vector<int64_t> keys(half - 1), values(vocab - half), slotOrder(slots);
  for (int64_t b = 0; b < batch; ++b) {
    // One stream per example: an example depends on neither the batch size nor its batch.
    detail::Rng rng(seed, static_cast<uint64_t>(firstExample + b));
    int64_t* in = inputs + b * seqLen;
    int64_t* tg = targets + b * seqLen;
    // Partial Fisher-Yates: the first `pairs` entries become distinct uniform draws.
    std::iota(keys.begin(), keys.end(), int64_t{1});
    std::iota(values.begin(), values.end(), half);
    std::iota(slotOrder.begin(), slotOrder.end(), int64_t{0});
    for (int64_t i = 0; i < pairs; ++i) {
      std::swap(keys[i], keys[i + rng.below(keys.size() - i)]);
      std::swap(values[i], values[i + rng.below(values.size() - i)]);
      std::swap(slotOrder[i], slotOrder[i + rng.below(slotOrder.size() - i)]);
    }
    // The remainder is noise first; queries overwrite their slots.
    for (int64_t t = context; t < seqLen; ++t) in[t] = static_cast<int64_t>(rng.below(vocab));
    for (int64_t i = 0; i < pairs; ++i) {
      in[2 * i] = keys[i];
      in[2 * i + 1] = values[i];
      const int64_t t = context + 2 * slotOrder[i];
      in[t] = keys[i];
      tg[t] = values[i];  // predicted at the key's position: the value is the next token
    }
  }
  return out;
}

std::unique_ptr<TokenStream> makeMqarStream(int64_t seqLen, int64_t pairs, int64_t vocab, uint64_t seed) {
  return std::make_unique<MqarStream>(seqLen, pairs, vocab, seed);
}

}  // namespace linac::data
