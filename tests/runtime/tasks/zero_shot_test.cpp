// Zero-shot task files (the shipped format samples and malformed ones) and lm-eval's scoring
// through a model whose log-likelihoods are known.
#include "tasks/report.h"
#include "tasks/ruler.h"
#include "tasks/zero_shot.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <cmath>

namespace linac::tasks {
namespace {

const std::string kSamples = LINAC_TASK_SAMPLES_DIR;

TEST(ZeroShotFiles, ShippedSamplesLoadAsTheirKind) {
  const std::vector<std::pair<std::string, ZeroShotKind>> expected{
      {"arc_easy", ZeroShotKind::MultipleChoice},   {"arc_challenge", ZeroShotKind::MultipleChoice},
      {"piqa", ZeroShotKind::MultipleChoice},       {"hellaswag", ZeroShotKind::MultipleChoice},
      {"winogrande", ZeroShotKind::PartialContext}, {"lambada_openai", ZeroShotKind::LastWord}};
  for (const auto& [name, kind] : expected) {
    const ZeroShotTask t = loadZeroShotTask(kSamples + "/" + name + ".jsonl", name);
    EXPECT_EQ(t.kind, kind) << name;
    EXPECT_GE(t.docs.size(), 3u) << name;
    for (const ZeroShotDoc& d : t.docs) EXPECT_EQ(d.delimiter, " ");
  }
  const ZeroShotTask w = loadZeroShotTask(kSamples + "/winogrande.jsonl", "winogrande");
  EXPECT_EQ(w.docs[0].contexts.size(), 2u);
  EXPECT_EQ(w.docs[0].continuations, std::vector<std::string>{"was too big."});
}

TEST(ZeroShotFiles, MalformedLinesNameTheirPlace) {
  testing::TempDir dir;
  auto expectError = [&](const std::string& body, const std::string& message) {
    const std::string path = dir.write("t.jsonl", body);
    try {
      loadZeroShotTask(path, "t");
      ADD_FAILURE() << "expected an error for: " << body;
    } catch (const data::DataError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  const std::string good = R"({"context": "Q", "choices": ["a", "b"], "gold": 1})";
  expectError(good + "\n{not json\n", "t.jsonl:2: not valid JSON");
  expectError(R"({"context": "Q", "choices": ["a", "b"], "gold": 2})", "t.jsonl:1: the line \"gold\" 2 is not an index");
  expectError(good + "\n" + R"({"context": "Q", "target": "w"})", "t.jsonl:2: the line is a last word");
  expectError(R"({"context": "Q", "choices": ["a"], "gold": 0})", "at least 2 strings");
  expectError(R"({"question": "Q"})", "has none of");
  expectError("\n\n", "no documents");
  const std::string delimited = dir.write("d.jsonl", R"({"context": "Q:", "choices": ["a", "b"], "gold": 0, "target_delimiter": ""})");
  EXPECT_EQ(loadZeroShotTask(delimited, "d").docs[0].delimiter, "");
}

TEST(ZeroShotEncoding, TrailingSpaceMovesToTheContinuation) {
  auto tok = data::makeByteTokenizer();
  const ContinuationRequest r = encodePair(*tok, "Answer: ", "yes");
  EXPECT_EQ(r.context, promptIds(*tok, "Answer:"));
  EXPECT_EQ(r.continuation, tok->encode(" yes"));
  EXPECT_THROW(encodePair(*tok, "Answer:", ""), std::invalid_argument);
}

/// Every continuation token has log-probability -(1 + |context| / 100) and is greedy unless it
/// is 'x': longer contexts make a continuation less likely.
class KnownModel final : public LanguageModel {
 public:
  static double perToken(const ContinuationRequest& r) { return -(1.0 + double(r.context.size()) / 100.0); }
  std::vector<TokenIds> generate(const std::vector<TokenIds>&, int64_t, std::optional<int64_t>) override {
    throw std::logic_error("not used by zero-shot tasks");
  }
  std::vector<ContinuationScore> score(const std::vector<ContinuationRequest>& requests) override {
    std::vector<ContinuationScore> out;
    for (const ContinuationRequest& r : requests) {
      ContinuationScore s;
      for (int64_t id : r.continuation) {
        s.logProbs.push_back(perToken(r));
        s.greedy.push_back(id != 'x');
      }
      out.push_back(s);
    }
    return out;
  }
};

TEST(ZeroShotScoring, AccAndAccNormAsLmEvalComputesThem) {
  testing::TempDir dir;
  // Doc 1: " a" (2 tokens) beats " bbbbbbbb" (9) in sum, loses per character: acc wrong, acc_norm right.
  // Doc 2: " no" (3 tokens) beats " yes" (4) in sum, loses per character (-3/2 < -4/3): acc right, acc_norm wrong.
  const std::string path = dir.write("mc.jsonl",
                                     R"({"context": "Q:", "choices": ["a", "bbbbbbbb"], "gold": 1})" "\n"
                                     R"({"context": "Q:", "choices": ["yes", "no"], "gold": 1})" "\n");
  auto tok = data::makeByteTokenizer();
  KnownModel model;
  const ZeroShotResult r = runZeroShot(model, *tok, loadZeroShotTask(path, "mc"), {});
  EXPECT_EQ(r.examples, 2);
  EXPECT_DOUBLE_EQ(r.acc, 0.5);
  ASSERT_TRUE(r.accNorm.has_value());
  EXPECT_DOUBLE_EQ(*r.accNorm, 0.5);
  EXPECT_FALSE(r.perplexity.has_value());

  ZeroShotOptions firstOnly;
  firstOnly.limit = 1;
  const ZeroShotResult one = runZeroShot(model, *tok, loadZeroShotTask(path, "mc"), firstOnly);
  EXPECT_EQ(one.examples, 1);
  EXPECT_DOUBLE_EQ(one.acc, 0.0);
  EXPECT_DOUBLE_EQ(*one.accNorm, 1.0);
}

TEST(ZeroShotScoring, PartialContextsPickTheMostLikelyContext) {
  testing::TempDir dir;
  // The shorter context gives the continuation the higher log-likelihood.
  const std::string path = dir.write("w.jsonl",
                                     R"({"contexts": ["The cat", "The big dog"], "continuation": "ran.", "gold": 0})" "\n"
                                     R"({"contexts": ["The cat", "The big dog"], "continuation": "ran.", "gold": 1})" "\n"
                                     R"({"contexts": ["A long first option", "Short"], "continuation": "ran.", "gold": 1})" "\n");
  auto tok = data::makeByteTokenizer();
  KnownModel model;
  const ZeroShotResult r = runZeroShot(model, *tok, loadZeroShotTask(path, "w"), {});
  EXPECT_DOUBLE_EQ(r.acc, 2.0 / 3.0);
  EXPECT_FALSE(r.accNorm.has_value());
}

TEST(ZeroShotScoring, LastWordAccuracyAndPerplexity) {
  testing::TempDir dir;
  const std::string path = dir.write("l.jsonl",
                                     R"({"context": "one two", "target": "ok"})" "\n"
                                     R"({"context": "three four five", "target": "xyz"})" "\n");
  auto tok = data::makeByteTokenizer();
  KnownModel model;
  const ZeroShotTask task = loadZeroShotTask(path, "l");
  const ZeroShotResult r = runZeroShot(model, *tok, task, {});
  EXPECT_DOUBLE_EQ(r.acc, 0.5);  // "xyz" is not the greedy continuation
  ASSERT_TRUE(r.perplexity.has_value());
  const ContinuationRequest a = encodePair(*tok, "one two", " ok"), b = encodePair(*tok, "three four five", " xyz");
  const double meanLogLikelihood =
      (KnownModel::perToken(a) * double(a.continuation.size()) + KnownModel::perToken(b) * double(b.continuation.size())) / 2.0;
  EXPECT_NEAR(*r.perplexity, std::exp(-meanLogLikelihood), 1e-9);

  const nlohmann::ordered_json j = zeroShotJson(r);
  EXPECT_EQ(j["task"], "l");
  EXPECT_EQ(j["acc"], 0.5);
  EXPECT_TRUE(j.contains("perplexity"));
  EXPECT_FALSE(j.contains("acc_norm"));
  std::ostringstream table;
  printZeroShotTable(table, {r});
  EXPECT_NE(table.str().find("0.5000"), std::string::npos) << table.str();
}

TEST(Report, JsonLinesAreAppended) {
  testing::TempDir dir;
  const std::string path = dir.str() + "/eval.jsonl";
  appendJsonLines(path, {nlohmann::ordered_json{{"task", "a"}}});
  appendJsonLines(path, {nlohmann::ordered_json{{"task", "b"}}, nlohmann::ordered_json{{"task", "c"}}});
  std::ifstream in(path);
  std::string line, tasks;
  while (std::getline(in, line)) tasks += nlohmann::json::parse(line)["task"].get<std::string>();
  EXPECT_EQ(tasks, "abc");
  EXPECT_THROW(appendJsonLines(dir.str() + "/missing/eval.jsonl", {}), std::runtime_error);
}

}  // namespace
}  // namespace linac::tasks
