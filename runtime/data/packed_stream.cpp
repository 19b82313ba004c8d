// Fixed-length training windows over a token sequence, visited in a seeded order per epoch.
// The stream's whole state is its position (windows consumed), so resuming is seek(position).
#include "data/data.h"

#include <cstring>
#include <numeric>

#include "data/rng.h"

namespace linac::data {
namespace {

class PackedStream final : public TokenStream {
 public:
  PackedStream(std::vector<int64_t> tokens, int64_t seqLen, uint64_t seed)
      : tokens_(std::move(tokens)), seqLen_(seqLen), seed_(seed) {
    if (seqLen < 1)
      throw std::invalid_argument("packed stream: seqLen must be >= 1, got " + std::to_string(seqLen));
    windows_ = tokens_.empty() ? 0 : (static_cast<int64_t>(tokens_.size()) - 1) / seqLen;
    if (windows_ == 0)
      throw DataError("packed stream: " + std::to_string(tokens_.size()) +
                      " tokens are fewer than seqLen + 1 = " + std::to_string(seqLen + 1));
  }

  torch::Tensor next(int64_t batch) override {
    if (batch < 1)
      throw std::invalid_argument("packed stream: batch must be >= 1, got " + std::to_string(batch));
    torch::Tensor out = torch::empty({batch, seqLen_ + 1}, torch::kLong);  // [batch, seqLen + 1]
    int64_t* dst = out.data_ptr<int64_t>();
    for (int64_t b = 0; b < batch; ++b, ++position_) {
      const int64_t window = windowAt(position_);
      std::memcpy(dst + b * (seqLen_ + 1), tokens_.data() + window * seqLen_,
                  (seqLen_ + 1) * sizeof(int64_t));
    }
    return out;
  }

  int64_t position() const override { return position_; }

  void seek(int64_t position) override {
    if (position < 0)
      throw std::invalid_argument("packed stream: position must be >= 0, got " + std::to_string(position));
    position_ = position;
  }

  int64_t tokensPerEpoch() const override { return windows_ * seqLen_; }

 private:
  // The window visited at `position`: epoch = position / windows, rank within it = the rest.
  int64_t windowAt(int64_t position) {
    const int64_t epoch = position / windows_;
    if (epoch != orderEpoch_) {
      order_.resize(windows_);
      std::iota(order_.begin(), order_.end(), int64_t{0});
      detail::Rng(seed_, static_cast<uint64_t>(epoch)).shuffle(order_);
      orderEpoch_ = epoch;
    }
    return order_[position % windows_];
  }

  std::vector<int64_t> tokens_;
  int64_t seqLen_;
  uint64_t seed_;
  int64_t windows_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> order_;  // the window order of epoch orderEpoch_ (a cache: derived from seed)
  int64_t orderEpoch_ = -1;
};

}  // namespace

std::unique_ptr<TokenStream> makePackedStream(std::vector<int64_t> tokens, int64_t seqLen, uint64_t seed) {
  return std::make_unique<PackedStream>(std::move(tokens), seqLen, seed);
}

}  // namespace linac::data
