// linac::data (runtime/data/data.h): tokenizers, every corpus reader and its errors (on small
// files in a temp dir), the held-out split, the packed stream's determinism / seek / epoch wrap,
// MQAR's layout and the generated default corpus.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data.h"
#include "data_test_support.h"

#ifdef LINAC_TEST_SENTENCEPIECE_TRAIN
#include <sentencepiece_trainer.h>
#endif

namespace linac::data {
namespace {

using test_support::expectThrows;
using test_support::le;
using test_support::TempDir;

std::vector<int64_t> ids(const std::string& text) { return makeByteTokenizer()->encode(text); }
std::vector<int64_t> concat(std::initializer_list<std::string> docs) {  // each + NUL
  std::vector<int64_t> out;
  for (const std::string& d : docs) {
    auto v = ids(d);
    out.insert(out.end(), v.begin(), v.end());
    out.push_back(0);
  }
  return out;
}
// --- tokenizers -----------------------------------------------------------------------------

TEST(ByteTokenizer, RoundTripsEveryByte) {
  auto tok = makeByteTokenizer();
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  all += "héllo wörld";
  const auto encoded = tok->encode(all);
  ASSERT_EQ(encoded.size(), all.size());
  for (int c = 0; c < 256; ++c) EXPECT_EQ(encoded[c], c);
  EXPECT_EQ(tok->decode(encoded), all);
  EXPECT_EQ(tok->vocabSize(), 256);
  EXPECT_EQ(tok->name(), "byte");
  EXPECT_EQ(tok->documentSeparator(), 0);
  expectThrows<std::invalid_argument>([&] { tok->decode({65, 256}); }, {"256", "0..255"});
  expectThrows<std::invalid_argument>([&] { tok->decode({-1}); }, {"-1"});
}

TEST(SentencePieceTokenizer, MissingModelNamesThePath) {
  expectThrows<DataError>([] { makeSentencePieceTokenizer("/nonexistent/spm.model"); },
                          {"/nonexistent/spm.model"});
}

#ifdef LINAC_TEST_SENTENCEPIECE_TRAIN
TEST(SentencePieceTokenizer, TrainedModelRoundTripsAndReadsCorpora) {
  TempDir dir;
  std::string text;
  for (const std::string& doc : defaultCorpusDocuments()) text += doc + "\n\n";
  const std::string input = dir.write("train.txt", text);
  const std::string prefix = dir.str() + "/spm";
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + input + " --model_prefix=" + prefix +
      " --vocab_size=300 --model_type=bpe --minloglevel=2 --input_sentence_size=2000");
  ASSERT_TRUE(status.ok()) << status.ToString();
  auto tok = makeSentencePieceTokenizer(prefix + ".model");
  EXPECT_EQ(tok->vocabSize(), 300);
  EXPECT_EQ(tok->name(), "sentencepiece:" + prefix + ".model");
  EXPECT_EQ(tok->documentSeparator(), 2);  // </s> in SentencePiece's default layout
  const std::string sample = "Once upon a time, 12 plus 7 is 19.";
  EXPECT_EQ(tok->decode(tok->encode(sample)), sample);
  const Corpus c = loadCorpus(dir.write("c.txt", "first doc\n\nsecond doc\n"), *tok, 0.5);
  EXPECT_EQ(c.train.back(), 2);
  EXPECT_EQ(c.heldOut.back(), 2);
}
#endif

// --- readers --------------------------------------------------------------------------------

TEST(LoadCorpus, TextSplitsAtBlankLines) {
  TempDir dir;
  const std::string path = dir.write("a.txt", "one\nstill one\n\n  \n\ttwo\n\n\nthree");
  const Corpus c = loadCorpus(path, *makeByteTokenizer(), 0.0);
  EXPECT_EQ(c.train, concat({"one\nstill one", "\ttwo", "three"}));
  EXPECT_TRUE(c.heldOut.empty());
  EXPECT_NE(c.description.find(path), std::string::npos);
  EXPECT_NE(c.description.find("3 documents"), std::string::npos) << c.description;
}

#ifdef LINAC_HAVE_NLOHMANN_JSON
TEST(LoadCorpus, JsonlTextFields) {
  TempDir dir;
  const std::string path = dir.write(
      "a.jsonl", "{\"text\": \"alpha\", \"id\": 1}\n\n{\"text\": \"beta\\n\\u00e9\"}\n{\"text\": \"\"}\n");
  const Corpus c = loadCorpus(path, *makeByteTokenizer(), 0.0);
  EXPECT_EQ(c.train, concat({"alpha", "beta\n\xc3\xa9"}));
}

TEST(LoadCorpus, JsonlErrorsNameFileAndLine) {
  TempDir dir;
  auto tok = makeByteTokenizer();
  const std::string noText = dir.write("a.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  expectThrows<DataError>([&] { loadCorpus(noText, *tok); }, {noText + ":2:", "no \"text\" field"});
  const std::string notString = dir.write("b.jsonl", "{\"text\": 5}\n");
  expectThrows<DataError>([&] { loadCorpus(notString, *tok); }, {notString + ":1:", "not a string"});
  const std::string bad = dir.write("c.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"unterminated}\n");
  expectThrows<DataError>([&] { loadCorpus(bad, *tok); }, {bad + ":3:", "invalid JSON"});
  const std::string array = dir.write("d.jsonl", "[\"text\"]\n");
  expectThrows<DataError>([&] { loadCorpus(array, *tok); }, {array + ":1:", "JSON object"});
}
#else
TEST(LoadCorpus, JsonlUnavailableSaysSo) {
  TempDir dir;
  const std::string path = dir.write("a.jsonl", "{\"text\": \"alpha\"}\n");
  expectThrows<DataError>([&] { loadCorpus(path, *makeByteTokenizer()); }, {path, "cannot read .jsonl"});
}
#endif

TEST(LoadCorpus, BinaryShardsBothWidths) {
  TempDir dir;
  auto tok = makeByteTokenizer();
  // Documents end after each separator (0); a tail without one is a document too.
  const std::string p16 = dir.write("a.bin", le({65, 66, 0, 200, 0, 67}, 2));
  const Corpus c16 = loadCorpus(p16, *tok, 0.0);
  EXPECT_EQ(c16.train, (std::vector<int64_t>{65, 66, 0, 200, 0, 67}));
  EXPECT_NE(c16.description.find("3 documents"), std::string::npos) << c16.description;
  const std::string p32 = dir.write("b.bin", le({255, 1, 0}, 4));
  EXPECT_EQ(loadCorpus(p32, *tok, 0.0, "uint32").train, (std::vector<int64_t>{255, 1, 0}));
}

TEST(LoadCorpus, BinaryErrors) {
  TempDir dir;
  auto tok = makeByteTokenizer();
  const std::string odd = dir.write("odd.bin", "abc");
  expectThrows<DataError>([&] { loadCorpus(odd, *tok); }, {odd, "3 bytes", "multiple of 2"});
  const std::string odd32 = dir.write("odd32.bin", "abcdef");
  expectThrows<DataError>([&] { loadCorpus(odd32, *tok, 0.01, "uint32"); }, {odd32, "multiple of 4"});
  const std::string big = dir.write("big.bin", le({1, 256}, 2));
  expectThrows<DataError>([&] { loadCorpus(big, *tok); }, {big, "id 256", "position 1", "vocabulary"});
  expectThrows<std::invalid_argument>([&] { loadCorpus(big, *tok, 0.01, "int8"); }, {"int8"});
}

TEST(LoadCorpus, DirectoryInSortedOrderSkippingOtherFiles) {
  TempDir dir;
  dir.write("b.txt", "second");
  dir.write("a.txt", "first");
  dir.write("sub/c.bin", le({'t', 'h', 'i', 'r', 'd', 0}, 2));
  dir.write("README.md", "not a corpus");
  const Corpus c = loadCorpus(dir.str(), *makeByteTokenizer(), 0.0);
  EXPECT_EQ(c.train, concat({"first", "second", "third"}));
  EXPECT_NE(c.description.find("3 files"), std::string::npos) << c.description;
}

TEST(LoadCorpus, PathErrors) {
  TempDir dir;
  auto tok = makeByteTokenizer();
  const std::string missing = dir.str() + "/nope.txt";
  expectThrows<DataError>([&] { loadCorpus(missing, *tok); }, {missing, "no such file"});
  const std::string csv = dir.write("x.csv", "a,b");
  expectThrows<DataError>([&] { loadCorpus(csv, *tok); }, {csv, "unknown extension \".csv\""});
  const std::string empty = dir.write("empty.txt", "\n \n\n");
  expectThrows<DataError>([&] { loadCorpus(empty, *tok); }, {empty, "empty corpus"});
  const std::string emptyDir = dir.mkdirs("emptydir");
  dir.write("emptydir/notes.md", "x");
  expectThrows<DataError>([&] { loadCorpus(emptyDir, *tok); }, {emptyDir, "no .txt, .jsonl or .bin"});
  expectThrows<std::invalid_argument>([&] { loadCorpus(empty, *tok, 1.0); }, {"heldOutFraction"});
}

// --- held-out split -------------------------------------------------------------------------

TEST(MakeCorpus, HoldsOutEvenlySpreadDocuments) {
  std::vector<std::vector<int64_t>> docs;
  for (int64_t i = 0; i < 100; ++i) docs.push_back({i + 1, i + 1, 0});  // 3 tokens each
  const Corpus c = makeCorpus(docs, 0.1, "test");
  EXPECT_EQ(c.heldOut.size(), 10u * 3);
  EXPECT_EQ(c.train.size(), 90u * 3);
  // Documents 5, 15, ..., 95 (the middle of each tenth), in corpus order.
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(c.heldOut[3 * i], 10 * i + 5 + 1);
  EXPECT_EQ(makeCorpus(docs, 0.1, "test").heldOut, c.heldOut);    // deterministic
  EXPECT_EQ(makeCorpus(docs, 0.001, "test").heldOut.size(), 3u);  // at least one document
  EXPECT_EQ(makeCorpus(docs, 0.999, "test").train.size(), 3u);    // at least one stays in train
  EXPECT_TRUE(makeCorpus(docs, 0.0, "test").heldOut.empty());
}

TEST(MakeCorpus, SingleDocumentSplitsByTokens) {
  std::vector<int64_t> doc(200);
  for (int64_t i = 0; i < 200; ++i) doc[i] = i;
  const Corpus c = makeCorpus({doc}, 0.05, "one");
  ASSERT_EQ(c.heldOut.size(), 10u);
  EXPECT_EQ(c.train.size(), 190u);
  EXPECT_EQ(c.heldOut.front(), 190);
  expectThrows<DataError>([] { makeCorpus({{}, {}}, 0.1, "where"); }, {"where", "empty corpus"});
}

// --- packed stream --------------------------------------------------------------------------

std::vector<int64_t> iotaTokens(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(PackedStream, WindowsShapeAndCoverage) {
  // 41 tokens, seqLen 8: windows start at 0, 8, 16, 24, 32 (each 9 tokens, sharing one).
  auto s = makePackedStream(iotaTokens(41), 8, 7);
  EXPECT_EQ(s->tokensPerEpoch(), 40);
  const torch::Tensor epoch = s->next(5);  // [5, 9]
  ASSERT_EQ(epoch.sizes(), (std::vector<int64_t>{5, 9}));
  EXPECT_EQ(epoch.scalar_type(), torch::kLong);
  std::set<int64_t> starts;
  for (int64_t b = 0; b < 5; ++b) {
    const int64_t start = epoch[b][0].item<int64_t>();
    EXPECT_EQ(start % 8, 0);
    EXPECT_TRUE(torch::equal(epoch[b], torch::arange(start, start + 9)));
    starts.insert(start);
  }
  EXPECT_EQ(starts.size(), 5u);  // every window exactly once per epoch
  EXPECT_EQ(s->position(), 5);
}

TEST(PackedStream, DeterministicSeekExactAndEpochsDiffer) {
  const auto tokens = iotaTokens(1000);
  auto a = makePackedStream(tokens, 16, 42), b = makePackedStream(tokens, 16, 42);
  std::vector<torch::Tensor> batches;
  for (int i = 0; i < 30; ++i) {  // 62 windows per epoch, 30 x 3 = 90 rows: crosses one boundary
    batches.push_back(a->next(3));
    EXPECT_TRUE(torch::equal(batches.back(), b->next(3)));
  }
  for (int64_t at : {0, 3, 60, 87}) {
    auto fresh = makePackedStream(tokens, 16, 42);
    fresh->seek(at);
    EXPECT_TRUE(torch::equal(fresh->next(3), batches[at / 3])) << "seek " << at;
  }
  a->seek(6);  // seeking backwards on a used stream works too
  EXPECT_TRUE(torch::equal(a->next(3), batches[2]));
  // Epoch 1 is a different order of the same windows.
  auto c = makePackedStream(tokens, 16, 42);
  const torch::Tensor e0 = c->next(62).select(1, 0), e1 = c->next(62).select(1, 0);
  EXPECT_FALSE(torch::equal(e0, e1));
  EXPECT_TRUE(torch::equal(std::get<0>(e0.sort()), std::get<0>(e1.sort())));
  // Another seed, another order.
  EXPECT_FALSE(torch::equal(makePackedStream(tokens, 16, 43)->next(62).select(1, 0), e0));
}

TEST(PackedStream, Errors) {
  expectThrows<DataError>([] { makePackedStream(iotaTokens(8), 8, 0); }, {"8 tokens", "seqLen + 1 = 9"});
  expectThrows<std::invalid_argument>([] { makePackedStream(iotaTokens(8), 0, 0); }, {"seqLen"});
  auto s = makePackedStream(iotaTokens(9), 8, 0);
  expectThrows<std::invalid_argument>([&] { s->next(0); }, {"batch"});
  expectThrows<std::invalid_argument>([&] { s->seek(-1); }, {"position"});
  EXPECT_TRUE(torch::equal(s->next(2)[1], torch::arange(0, 9)));  // one window, every epoch
}

// --- MQAR -----------------------------------------------------------------------------------

TEST(Mqar, LayoutTargetsAndValues) {
  const int64_t batch = 16, seqLen = 64, pairs = 8, vocab = 100;
  const MqarBatch m = makeMqar(batch, seqLen, pairs, vocab, 123);
  ASSERT_EQ(m.inputs.sizes(), (std::vector<int64_t>{batch, seqLen}));
  ASSERT_EQ(m.targets.sizes(), (std::vector<int64_t>{batch, seqLen}));
  std::set<std::vector<int64_t>> distinctQueryOrders;
  for (int64_t b = 0; b < batch; ++b) {
    const auto in = m.inputs[b], tg = m.targets[b];
    std::map<int64_t, int64_t> kv;
    std::vector<int64_t> keyOrder;
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t k = in[2 * i].item<int64_t>(), v = in[2 * i + 1].item<int64_t>();
      EXPECT_GE(k, 1);
      EXPECT_LT(k, vocab / 2);
      EXPECT_GE(v, vocab / 2);
      EXPECT_LT(v, vocab);
      EXPECT_TRUE(kv.emplace(k, v).second) << "duplicate key";
      keyOrder.push_back(k);
      EXPECT_EQ(tg[2 * i].item<int64_t>(), -100);
      EXPECT_EQ(tg[2 * i + 1].item<int64_t>(), -100);
    }
    std::set<int64_t> values;
    for (const auto& [k, v] : kv) values.insert(v);
    EXPECT_EQ(values.size(), static_cast<size_t>(pairs)) << "values are distinct";
    std::vector<int64_t> queried;
    for (int64_t t = 2 * pairs; t < seqLen; ++t) {
      const int64_t target = tg[t].item<int64_t>(), token = in[t].item<int64_t>();
      EXPECT_GE(token, 0);
      EXPECT_LT(token, vocab);
      if (target == -100) continue;
      EXPECT_EQ((t - 2 * pairs) % 2, 0) << "queries sit at even offsets of the remainder";
      ASSERT_TRUE(kv.count(token)) << "a target sits where the input is a key";
      EXPECT_EQ(target, kv.at(token));
      queried.push_back(token);
    }
    EXPECT_EQ(queried.size(), static_cast<size_t>(pairs)) << "each key is queried once";
    EXPECT_EQ(std::set<int64_t>(queried.begin(), queried.end()).size(), static_cast<size_t>(pairs));
    distinctQueryOrders.insert(queried);
    EXPECT_EQ((tg != -100).sum().item<int64_t>(), pairs);
  }
  EXPECT_GT(distinctQueryOrders.size(), 1u) << "queries come in random order";
}

TEST(Mqar, DeterministicBySeedAndPerExample) {
  const MqarBatch a = makeMqar(8, 32, 4, 64, 5), b = makeMqar(8, 32, 4, 64, 5), c = makeMqar(8, 32, 4, 64, 6);
  EXPECT_TRUE(torch::equal(a.inputs, b.inputs));
  EXPECT_TRUE(torch::equal(a.targets, b.targets));
  EXPECT_FALSE(torch::equal(a.inputs, c.inputs));
  // Example b does not depend on the batch size.
  EXPECT_TRUE(torch::equal(makeMqar(3, 32, 4, 64, 5).inputs, a.inputs.slice(0, 0, 3)));
  EXPECT_FALSE(torch::equal(a.inputs[0], a.inputs[1]));
}

TEST(Mqar, MinimalShapesAndValidation) {
  const MqarBatch m = makeMqar(4, 8, 2, 6, 1);  // seqLen = 4 * pairs, vocab = 2 * (pairs + 1)
  EXPECT_EQ((m.targets != -100).sum().item<int64_t>(), 8);
  expectThrows<std::invalid_argument>([] { makeMqar(1, 15, 4, 64, 0); }, {"seqLen 15", "4 * pairs"});
  expectThrows<std::invalid_argument>([] { makeMqar(1, 64, 8, 17, 0); }, {"vocab 17", "vocab must be"});
  expectThrows<std::invalid_argument>([] { makeMqar(1, 64, 0, 64, 0); }, {"pairs must be"});
  expectThrows<std::invalid_argument>([] { makeMqar(0, 64, 4, 64, 0); }, {"batch must be"});
}

// MQAR as a training stream: [batch, 2, seqLen] (inputs, targets); the loss mask (targets !=
// -100) covers exactly the answer positions - where the input is a query of a context key -
// and each answer is the value bound to that key; the stream is resumable by position.
TEST(MqarStream, MaskedBatchesAndResume) {
  const int64_t seqLen = 32, pairs = 4, vocab = 64, batch = 6;
  auto s = makeMqarStream(seqLen, pairs, vocab, 9);
  const torch::Tensor w = s->next(batch);  // [batch, 2, seqLen]
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{batch, 2, seqLen}));
  EXPECT_EQ(s->position(), batch);
  for (int64_t b = 0; b < batch; ++b) {
    const torch::Tensor in = w[b][0], tg = w[b][1];  // [seqLen] each
    std::map<int64_t, int64_t> kv;  // the context's bindings
    for (int64_t i = 0; i < pairs; ++i) kv[in[2 * i].item<int64_t>()] = in[2 * i + 1].item<int64_t>();
    std::set<int64_t> answered;
    for (int64_t t = 0; t < seqLen; ++t) {
      const int64_t token = in[t].item<int64_t>(), target = tg[t].item<int64_t>();
      if (target == kIgnoreTarget) continue;
      // Scored: an even offset after the context whose input is a context key (a query); noise
      // may repeat a key elsewhere, so positions are checked this way round.
      EXPECT_GE(t, 2 * pairs) << "example " << b << ": no loss inside the key-value context";
      EXPECT_EQ((t - 2 * pairs) % 2, 0);
      ASSERT_TRUE(kv.count(token)) << "example " << b << ": loss at " << t << ", whose input is no key";
      EXPECT_EQ(target, kv.at(token)) << "the answer is the value bound to the queried key";
      EXPECT_TRUE(answered.insert(token).second) << "each key is answered once";
    }
    const int64_t answers = static_cast<int64_t>(answered.size());
    EXPECT_EQ(answers, pairs) << "every key answered, nothing else scored";
    EXPECT_EQ((tg != kIgnoreTarget).sum().item<int64_t>(), pairs);
  }
  // Example p of the stream is example p of makeMqar with the same seed, whatever the batching.
  const MqarBatch ref = makeMqar(batch + 5, seqLen, pairs, vocab, 9);
  EXPECT_TRUE(torch::equal(w.select(1, 0), ref.inputs.slice(0, 0, batch)));
  EXPECT_TRUE(torch::equal(w.select(1, 1), ref.targets.slice(0, 0, batch)));
  const torch::Tensor rest = torch::cat({s->next(2), s->next(3)});  // [5, 2, seqLen]
  EXPECT_TRUE(torch::equal(rest.select(1, 0), ref.inputs.slice(0, batch)));
  // Resume: a fresh stream seeked to the position continues with the same examples.
  auto resumed = makeMqarStream(seqLen, pairs, vocab, 9);
  resumed->seek(batch);
  EXPECT_TRUE(torch::equal(resumed->next(5), rest));
  EXPECT_FALSE(torch::equal(makeMqarStream(seqLen, pairs, vocab, 10)->next(batch), w)) << "another seed";
  expectThrows<std::invalid_argument>([] { makeMqarStream(15, 4, 64, 0); }, {"seqLen 15"});
  expectThrows<std::invalid_argument>([&] { resumed->seek(-1); }, {"position"});
}

// --- default corpus -------------------------------------------------------------------------

double unigramBits(const std::vector<int64_t>& ids, int64_t vocab) {
  std::vector<double> counts(vocab, 0.0);
  for (int64_t id : ids) counts[id] += 1.0;
  double h = 0.0;
  for (double c : counts)
    if (c > 0) h -= c / ids.size() * std::log2(c / ids.size());
  return h;
}
double bigramConditionalBits(const std::vector<int64_t>& ids, int64_t vocab) {  // H(x_t | x_{t-1})
  std::vector<double> pair(vocab * vocab, 0.0), prev(vocab, 0.0);
  for (size_t i = 1; i < ids.size(); ++i) pair[ids[i - 1] * vocab + ids[i]] += 1.0, prev[ids[i - 1]] += 1.0;
  double h = 0.0;
  const double n = ids.size() - 1;
  for (int64_t a = 0; a < vocab; ++a)
    for (int64_t b = 0; b < vocab; ++b)
      if (pair[a * vocab + b] > 0) h -= pair[a * vocab + b] / n * std::log2(pair[a * vocab + b] / prev[a]);
  return h;
}

TEST(DefaultCorpus, DeterministicFastAndLearnable) {
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = makeByteTokenizer();
  const Corpus c = defaultCorpus(*tok);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 0.2);
  const Corpus again = defaultCorpus(*tok);
  EXPECT_EQ(c.train, again.train);
  EXPECT_EQ(c.heldOut, again.heldOut);
  EXPECT_EQ(defaultCorpusDocuments(), defaultCorpusDocuments());

  const size_t total = c.train.size() + c.heldOut.size();
  EXPECT_GT(total, 200'000u);
  EXPECT_LT(total, 2'000'000u);
  EXPECT_NEAR(static_cast<double>(c.heldOut.size()) / total, 0.01, 0.005);
  const double h1 = unigramBits(c.train, 256), h2 = bigramConditionalBits(c.train, 256);
  EXPECT_GT(h1, 3.0);
  EXPECT_LT(h1, 5.5);
  EXPECT_LT(h2, h1 - 1.0) << "context must help: bigram conditional entropy well below unigram";
  const auto docs = defaultCorpusDocuments();
  std::cout << "default corpus: " << docs.size() << " documents, " << total << " bytes, " << seconds * 1e3
            << " ms, unigram " << h1 << " bits/byte, bigram-conditional " << h2 << " bits/byte\n";
  for (const std::string& d : docs) ASSERT_EQ(d.find('\0'), std::string::npos);
  std::set<std::string> unique(docs.begin(), docs.end());
  EXPECT_GT(unique.size(), docs.size() * 9 / 10) << "documents vary";
}

}  // namespace
}  // namespace linac::data
