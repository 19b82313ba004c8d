// Fixed-length training windows over a token sequence, visited in a seeded order per epoch.
// The stream's whole state is its position (global windows consumed), so resuming is
// seek(position). The tokens are fetched window by window through a reader, so the sequence may
// be an in-memory vector or memory-mapped shards (token_shards.cpp) alike.
#include "data/data.h"

#include <cstring>
#include <numeric>

#include "data/rng.h"

namespace linac::data {
namespace {

class WindowStream final : public TokenStream {
 public:
  WindowStream(TokenReader read, int64_t tokens, int64_t seqLen, uint64_t seed, int rank, int worldSize)
      : read_(std::move(read)), seqLen_(seqLen), seed_(seed), rank_(rank), worldSize_(worldSize) {
    if (seqLen < 1)
      throw std::invalid_argument("packed stream: seqLen must be >= 1, got " + std::to_string(seqLen));
    if (worldSize < 1 || rank < 0 || rank >= worldSize)
      throw std::invalid_argument("packed stream: need 0 <= rank < worldSize, got rank " + std::to_string(rank) +
                                  " of " + std::to_string(worldSize));
    windows_ = tokens <= 0 ? 0 : (tokens - 1) / seqLen;
    if (windows_ == 0)
      throw DataError("packed stream: " + std::to_string(tokens) + " tokens are fewer than seqLen + 1 = " +
                      std::to_string(seqLen + 1));
  }

  torch::Tensor next(int64_t batch) override {
    if (batch < 1)
      throw std::invalid_argument("packed stream: batch must be >= 1, got " + std::to_string(batch));
    torch::Tensor out = torch::empty({batch, seqLen_ + 1}, torch::kLong);  // [batch, seqLen + 1]
    int64_t* dst = out.data_ptr<int64_t>();
    // This rank's rows of the global batch [worldSize * batch, seqLen + 1].
    const int64_t first = position_ + int64_t(rank_) * batch;
    for (int64_t b = 0; b < batch; ++b) read_(windowAt(first + b) * seqLen_, seqLen_ + 1, dst + b * (seqLen_ + 1));
    position_ += int64_t(worldSize_) * batch;
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

  TokenReader read_;
  int64_t seqLen_;
  uint64_t seed_;
  int rank_;
  int worldSize_;
  int64_t windows_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> order_;  // the window order of epoch orderEpoch_ (a cache: derived from seed)
  int64_t orderEpoch_ = -1;
};

}  // namespace

std::unique_ptr<TokenStream> makeWindowStream(TokenReader read, int64_t tokens, int64_t seqLen, uint64_t seed,
                                              int rank, int worldSize) {
  return std::make_unique<WindowStream>(std::move(read), tokens, seqLen, seed, rank, worldSize);
}

std::unique_ptr<TokenStream> makePackedStream(std::vector<int64_t> tokens, int64_t seqLen, uint64_t seed, int rank,
                                              int worldSize) {
  auto held = std::make_shared<const std::vector<int64_t>>(std::move(tokens));
  auto read = [held](int64_t start, int64_t count, int64_t* dst) {
    std::memcpy(dst, held->data() + start, size_t(count) * sizeof(int64_t));
  };
  return makeWindowStream(std::move(read), int64_t(held->size()), seqLen, seed, rank, worldSize);
}

}  // namespace linac::data
