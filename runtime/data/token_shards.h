// Pre-tokenized token shards, read lazily through mmap (tools/pretokenize.py writes them).
//
// A shard is three files side by side:
//   NAME.bin   the ids, little-endian uint16 or uint32, documents joined, each ending with the
//              tokenizer's document separator (as a Corpus joins them);
//   NAME.idx   the position in NAME.bin of each document's first token, little-endian uint64;
//   NAME.json  the header: {"format": "linac-token-shard", "dtype": "uint16" | "uint32",
//              "vocab_size": V, "tokens": N, "documents": D, "document_separator": S | null,
//              "tokenizer": {"kind": "sentencepiece" | "huggingface", "path": ..., "sha256": ...}}.
// A shard set is one shard or every shard below a directory, joined in sorted path order. Nothing
// is read up front but the headers and the document indexes' sizes: a stream over a set reads
// only the windows it yields, so every rank of a data-parallel run maps the same files and
// touches only its own windows.
#pragma once

#include "data/data.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace linac::data {

/// The format name a shard header's "format" field holds.
inline constexpr const char* kTokenShardFormat = "linac-token-shard";

/// Held out of a shard set for evaluation: whole documents at its end, about this fraction of
/// its tokens but at most kMaxShardHeldOutTokens (read into memory as int64 windows).
inline constexpr double kShardHeldOutFraction = 0.01;
inline constexpr int64_t kMaxShardHeldOutTokens = int64_t{1} << 22;

/// True when `path` is a shard's .bin whose .json header lies beside it, or a directory holding
/// such a .bin (then every corpus file below it must be one: TokenShards::open checks).
bool isTokenShardPath(const std::string& path);

class TokenShards {
 public:
  /// Maps the shard at `path` (NAME.bin, its header NAME.json beside it) or every shard below a
  /// directory. `dtype` ("uint16" / "uint32") must match every header; empty: the headers'
  /// (all alike). Throws DataError naming the file and what is wrong (a missing or malformed
  /// header, a size that disagrees with it, mixed dtypes or vocabularies, text files mixed in).
  static std::shared_ptr<const TokenShards> open(const std::string& path, const std::string& dtype = "");
  ~TokenShards();
  TokenShards(const TokenShards&) = delete;
  TokenShards& operator=(const TokenShards&) = delete;

  int64_t tokens() const { return tokens_; }
  int64_t documents() const { return documents_; }
  int64_t vocabSize() const { return vocabSize_; }
  const std::string& dtype() const { return dtype_; }
  /// The first header's tokenizer, e.g. "sentencepiece bench/tokenizer32k.model (sha256 ab12...)".
  const std::string& tokenizer() const { return tokenizer_; }
  /// The id that ends every document (the headers' document_separator), or none when the shards
  /// join documents without one (their .idx alone marks the starts).
  std::optional<int64_t> documentSeparator() const { return separator_; }
  /// The SHA-256 (hex) of the tokenizer file the first header names; empty when it names none.
  const std::string& tokenizerSha256() const { return tokenizerSha256_; }
  /// "PATH: 3 shards, uint16, vocab 32000, 1234 documents, 567890 tokens".
  const std::string& description() const { return description_; }

  /// Copies ids [start, start + count) of the joined shards into dst; throws DataError naming
  /// the shard and position of an id >= vocabSize() (a shard that disagrees with its header).
  void read(int64_t start, int64_t count, int64_t* dst) const;
  /// The first document start at or after `position` (tokens() when there is none).
  int64_t documentStartAtOrAfter(int64_t position) const;
  /// Every document's first token in joined positions, ascending (8 bytes per document).
  std::vector<int64_t> documentStarts() const;

 private:
  struct Shard;
  TokenShards() = default;
  std::vector<std::unique_ptr<Shard>> shards_;
  int64_t tokens_ = 0;
  int64_t documents_ = 0;
  int64_t vocabSize_ = 0;
  std::optional<int64_t> separator_;
  std::string dtype_;
  std::string tokenizer_;
  std::string tokenizerSha256_;
  std::string description_;
};

/// The first held-out position of a shard set (training uses [0, it), evaluation the rest): the
/// start of the first document that begins within the last min(round(fraction * tokens),
/// maxTokens) tokens, or that many tokens from the end when no document begins there. Throws
/// DataError when fewer than minTrainTokens would remain for training.
int64_t shardHeldOutStart(const TokenShards& shards, int64_t minTrainTokens,
                          double fraction = kShardHeldOutFraction, int64_t maxTokens = kMaxShardHeldOutTokens);

/// A training stream over ids [0, end) of a shard set (makeWindowStream over TokenShards::read).
std::unique_ptr<TokenStream> makeShardStream(std::shared_ptr<const TokenShards> shards, int64_t end, int64_t seqLen,
                                             uint64_t seed, int rank = 0, int worldSize = 1);

}  // namespace linac::data
