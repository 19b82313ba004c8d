// Memory-mapped token shards (runtime/data/token_shards.h): shards written byte by byte here are
// read back exactly, across shard boundaries; the stream over them is the in-memory packed
// stream's, window for window; rank streams are disjoint and cover every global batch; a resume
// by position continues exactly; dtype, vocabulary and size disagreements are errors naming the
// file. With LINAC_PRETOKENIZED (set by the pretokenize-roundtrip ctest) it also checks that
// tools/pretokenize.py's shards hold exactly the ids linac's own SentencePiece reader makes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <vector>
#include <sstream>

#include "data/data.h"
#include "data/token_shards.h"
#include "data_test_support.h"

namespace linac::data {
namespace {

using test_support::expectThrows;
using test_support::le;
using test_support::TempDir;

constexpr int64_t kVocab = 1000;
constexpr int64_t kSeparator = 0;

/// Writes NAME.bin / .idx / .json for `documents` (each gets the separator appended).
void writeShard(const TempDir& dir, const std::string& name, const std::vector<std::vector<uint32_t>>& documents,
                const std::string& dtype = "uint16", int64_t vocab = kVocab) {
  const int width = dtype == "uint16" ? 2 : 4;
  std::string bin, idx;
  uint32_t tokens = 0;
  for (const auto& doc : documents) {
    idx += le({tokens, 0}, 4);  // a uint64: low then high 32 bits
    for (uint32_t id : doc) bin += le({id}, width);
    bin += le({uint32_t(kSeparator)}, width);
    tokens += uint32_t(doc.size() + 1);
  }
  dir.write(name + ".bin", bin);
  dir.write(name + ".idx", idx);
  std::ostringstream header;
  header << "{\"format\": \"linac-token-shard\", \"dtype\": \"" << dtype << "\", \"vocab_size\": " << vocab
         << ", \"tokens\": " << tokens << ", \"documents\": " << documents.size()
         << ", \"document_separator\": 0, \"tokenizer\": {\"kind\": \"sentencepiece\", \"path\": \"t.model\"}}";
  dir.write(name + ".json", header.str());
}

/// Documents of ids 1.. (distinct, so every window is told apart), and their joined ids.
std::vector<std::vector<uint32_t>> documents(int count, int length, uint32_t first) {
  std::vector<std::vector<uint32_t>> docs(count);
  for (auto& d : docs)
    for (int i = 0; i < length; ++i) d.push_back(first++);
  return docs;
}
std::vector<int64_t> joined(const std::vector<std::vector<uint32_t>>& docs) {
  std::vector<int64_t> out;
  for (const auto& d : docs) {
    out.insert(out.end(), d.begin(), d.end());
    out.push_back(kSeparator);
  }
  return out;
}

struct TwoShards {
  TempDir dir;
  std::vector<int64_t> tokens;
  TwoShards() {
    const auto a = documents(7, 12, 1), b = documents(5, 20, 200);
    writeShard(dir, "set/a", a);
    writeShard(dir, "set/sub/b", b);  // below a subdirectory: sorted path order puts it second
    tokens = joined(a);
    const auto tail = joined(b);
    tokens.insert(tokens.end(), tail.begin(), tail.end());
  }
  std::string path() const { return dir.str() + "/set"; }
};

TEST(TokenShards, ReadBackExactlyAcrossShards) {
  TwoShards set;
  ASSERT_TRUE(isTokenShardPath(set.path()));
  ASSERT_TRUE(isTokenShardPath(set.path() + "/a.bin"));
  const auto shards = TokenShards::open(set.path());
  EXPECT_EQ(shards->tokens(), int64_t(set.tokens.size()));
  EXPECT_EQ(shards->documents(), 12);
  EXPECT_EQ(shards->vocabSize(), kVocab);
  EXPECT_EQ(shards->dtype(), "uint16");
  EXPECT_NE(shards->description().find("2 shards, uint16, vocab 1000, 12 documents"), std::string::npos)
      << shards->description();
  std::vector<int64_t> all(set.tokens.size());
  shards->read(0, int64_t(all.size()), all.data());
  EXPECT_EQ(all, set.tokens);
  std::vector<int64_t> across(30);  // 91 tokens in shard a: this range spans both
  shards->read(80, 30, across.data());
  EXPECT_EQ(across, std::vector<int64_t>(set.tokens.begin() + 80, set.tokens.begin() + 110));
  // Document starts: every 13 tokens in a, then every 21 from 91.
  const std::vector<int64_t> starts = shards->documentStarts();
  ASSERT_EQ(starts.size(), 12u);
  EXPECT_EQ(starts[6], 78);
  EXPECT_EQ(starts[7], 91);
  EXPECT_EQ(starts[11], 91 + 4 * 21);
  EXPECT_EQ(shards->documentStartAtOrAfter(79), 91);
  EXPECT_EQ(shards->documentStartAtOrAfter(91), 91);
  EXPECT_EQ(shards->documentStartAtOrAfter(177), shards->tokens());
  expectThrows<std::out_of_range>([&] { shards->read(190, 10, all.data()); }, {"outside"});
}

TEST(TokenShards, Uint32ShardsAndTheDtypeCheck) {
  TempDir dir;
  writeShard(dir, "w/a", {{70000, 5, 6}}, "uint32", 80000);
  const auto shards = TokenShards::open(dir.str() + "/w", "uint32");
  std::vector<int64_t> ids(4);
  shards->read(0, 4, ids.data());
  EXPECT_EQ(ids, (std::vector<int64_t>{70000, 5, 6, kSeparator}));
  // Asked for another width than the header's: refused, naming the header.
  expectThrows<DataError>([&] { TokenShards::open(dir.str() + "/w", "uint16"); },
                          {"a.json", "uint32 ids", "uint16 was asked for"});
  // Mixed widths in one set.
  writeShard(dir, "w/b", {{1, 2}}, "uint16", 80000);
  expectThrows<DataError>([&] { TokenShards::open(dir.str() + "/w"); }, {"b.json", "uint16 ids", "before it uint32"});
}

TEST(TokenShards, ErrorsNameTheFile) {
  TempDir dir;
  writeShard(dir, "v/a", {{1, 2}});
  writeShard(dir, "v/b", {{1, 2}}, "uint16", 2 * kVocab);
  expectThrows<DataError>([&] { TokenShards::open(dir.str() + "/v"); }, {"b.json", "vocab_size 2000", "(1000)"});

  writeShard(dir, "t/a", {{1, 2, 3}});
  dir.write("t/a.bin", le({1, 2}, 2));  // truncated
  expectThrows<DataError>([&] { TokenShards::open(dir.str() + "/t"); }, {"a.bin", "4 bytes", "4 uint16 tokens"});

  writeShard(dir, "i/a", {{1, 2, 3}});
  dir.write("i/a.idx", "");
  expectThrows<DataError>([&] { TokenShards::open(dir.str() + "/i"); }, {"a.idx", "0 bytes", "1 documents"});

  writeShard(dir, "m/a", {{1}});
  dir.write("m/notes.txt", "text");
  expectThrows<DataError>([&] { TokenShards::open(dir.str() + "/m"); }, {"notes.txt", "not a token shard"});

  dir.write("h/a.bin", le({1}, 2));
  dir.write("h/a.json", "{\"format\": \"linac-token-shard\", \"dtype\": \"uint16\"}");
  expectThrows<DataError>([&] { TokenShards::open(dir.str() + "/h"); }, {"a.json", "not a token shard header"});

  writeShard(dir, "o/a", {{1, 2, kVocab + 5}});  // an id the header's vocabulary does not hold
  const auto bad = TokenShards::open(dir.str() + "/o");
  std::vector<int64_t> ids(4);
  expectThrows<DataError>([&] { bad->read(0, 4, ids.data()); }, {"a.bin", "id 1005", "position 2", "(1000)"});

  // The in-memory corpus reader refuses a shard with a header rather than misread its width.
  expectThrows<DataError>([&] { loadCorpus(dir.str() + "/o/a.bin", *makeByteTokenizer()); }, {"a.json", "lazily"});
}

TEST(TokenShards, StreamIsThePackedStreamAndResumesByPosition) {
  TwoShards set;
  const auto shards = TokenShards::open(set.path());
  constexpr int64_t kSeqLen = 8, kBatch = 3;
  auto fromShards = makeShardStream(shards, shards->tokens(), kSeqLen, 5);
  auto inMemory = makePackedStream(set.tokens, kSeqLen, 5);
  EXPECT_EQ(fromShards->tokensPerEpoch(), inMemory->tokensPerEpoch());
  std::vector<torch::Tensor> batches;
  for (int i = 0; i < 12; ++i) {  // 24 windows per epoch: 36 rows cross an epoch boundary
    batches.push_back(fromShards->next(kBatch));
    EXPECT_TRUE(torch::equal(batches.back(), inMemory->next(kBatch))) << "batch " << i;
  }
  // A fresh stream seeked to a recorded position continues exactly.
  auto resumed = makeShardStream(shards, shards->tokens(), kSeqLen, 5);
  resumed->seek(7 * kBatch);
  for (int i = 7; i < 12; ++i) EXPECT_TRUE(torch::equal(resumed->next(kBatch), batches[i])) << "batch " << i;
  EXPECT_EQ(resumed->position(), 12 * kBatch);
}

TEST(TokenShards, RankStreamsAreDisjointAndCoverEveryGlobalBatch) {
  TwoShards set;
  const auto shards = TokenShards::open(set.path());
  constexpr int64_t kSeqLen = 4, kBatch = 2;
  constexpr int kWorld = 3;
  const int64_t windows = (shards->tokens() - 1) / kSeqLen;
  auto global = makeShardStream(shards, shards->tokens(), kSeqLen, 9);
  std::vector<std::unique_ptr<TokenStream>> ranks;
  for (int r = 0; r < kWorld; ++r) ranks.push_back(makeShardStream(shards, shards->tokens(), kSeqLen, 9, r, kWorld));
  const int64_t steps = windows / (kWorld * kBatch);
  for (int64_t step = 0; step < steps; ++step) {
    const torch::Tensor all = global->next(kWorld * kBatch);  // [kWorld * kBatch, kSeqLen + 1]
    for (int r = 0; r < kWorld; ++r) {
      const torch::Tensor mine = ranks[r]->next(kBatch);
      EXPECT_TRUE(torch::equal(mine, all.slice(0, r * kBatch, (r + 1) * kBatch))) << "step " << step << " rank " << r;
      EXPECT_EQ(ranks[r]->position(), global->position());
    }
  }
  // Within the epoch no window was read twice, by one rank or by two.
  std::set<std::vector<int64_t>> seen;
  auto check = makeShardStream(shards, shards->tokens(), kSeqLen, 9);
  const torch::Tensor epoch = check->next(steps * kWorld * kBatch);
  for (int64_t i = 0; i < epoch.size(0); ++i) {
    const torch::Tensor row = epoch[i];
    EXPECT_TRUE(seen.insert(std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel())).second)
        << "window " << i << " repeated";
  }
  expectThrows<std::invalid_argument>([&] { makeShardStream(shards, shards->tokens(), kSeqLen, 9, 3, 3); }, {"rank 3 of 3"});
}

TEST(TokenShards, HeldOutIsWholeDocumentsAtTheEnd) {
  TwoShards set;
  const auto shards = TokenShards::open(set.path());
  // Documents start at 0, 13, ..., 78, then 91, 112, 133, 154, 175; 196 tokens.
  // 10% = 20 tokens: no document starts in the last 20, so the last 20 tokens.
  EXPECT_EQ(shardHeldOutStart(*shards, 9, 0.1), 176);
  // Capped at 30 tokens: 196 - 30 = 166 -> the document at 175.
  EXPECT_EQ(shardHeldOutStart(*shards, 9, 0.5, 30), 175);
  EXPECT_EQ(shardHeldOutStart(*shards, 9, 0.5, 5), 191);
  EXPECT_EQ(shardHeldOutStart(*shards, 9, 0.0), 196);
  expectThrows<DataError>([&] { shardHeldOutStart(*shards, 190, 0.1); }, {"too small", "190"});
}

// tools/pretokenize.py -> shards -> the ids linac's SentencePiece reader makes of the same text.
TEST(TokenShards, PretokenizedShardsHoldTheRuntimeTokenizersIds) {
  const char* spec = std::getenv("LINAC_PRETOKENIZED");  // "SHARD_DIR;TEXT_FILE;MODEL"
  if (!spec) GTEST_SKIP() << "run by the pretokenize-roundtrip test (LINAC_PRETOKENIZED unset)";
  std::stringstream parts(spec);
  std::string shardDir, textFile, model;
  std::getline(parts, shardDir, ';');
  std::getline(parts, textFile, ';');
  std::getline(parts, model, ';');
  auto tokenizer = makeSentencePieceTokenizer(model);
  const Corpus corpus = loadCorpus(textFile, *tokenizer, 0.0);  // paragraphs as documents, separators
  const auto shards = TokenShards::open(shardDir);
  EXPECT_EQ(shards->vocabSize(), tokenizer->vocabSize());
  std::vector<int64_t> ids(size_t(shards->tokens()));
  shards->read(0, shards->tokens(), ids.data());
  EXPECT_EQ(ids, corpus.train);
  // Every recorded document start follows a separator.
  for (int64_t start : shards->documentStarts())
    if (start > 0) EXPECT_EQ(ids[size_t(start - 1)], tokenizer->documentSeparator()) << "document at " << start;
}

}  // namespace
}  // namespace linac::data
