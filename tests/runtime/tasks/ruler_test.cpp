// RULER's generators: every prompt fits its context (measured with the tokenizer) and nearly fills
// it, its answer can be recovered from the prompt alone (parsed independently of the generator),
// and examples are deterministic. Then runRuler's scoring through a model that answers from a
// table, and the reports.
#include "tasks/report.h"
#include "tasks/ruler.h"
#include "tasks/ruler_run.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#ifdef LINAC_TEST_SENTENCEPIECE_TRAIN
#include <sentencepiece_trainer.h>
#endif

namespace linac::tasks {
namespace {

using testing::byteSetup;

std::set<std::string> asSet(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

std::map<std::string, int64_t> countWords(const std::vector<std::string>& words) {
  std::map<std::string, int64_t> counts;
  for (const std::string& w : words) ++counts[w];
  return counts;
}

/// The `n` most frequent words, checked to be strictly more frequent than every other word.
void expectTopWords(const std::map<std::string, int64_t>& counts, const std::vector<std::string>& answers) {
  int64_t lowestAnswer = INT64_MAX, highestOther = 0;
  for (const auto& [word, count] : counts) {
    if (asSet(answers).count(word)) lowestAnswer = std::min(lowestAnswer, count);
    else highestOther = std::max(highestOther, count);
  }
  for (const std::string& a : answers) EXPECT_TRUE(counts.count(a)) << a << " is not in the list";
  EXPECT_GT(lowestAnswer, highestOther);
}

/// What the prompt of `task` says the answer is, parsed from its text.
void expectRecoverable(const std::string& task, const RulerExample& ex) {
  const std::string& p = ex.prompt;
  if (task.rfind("niah", 0) == 0) {
    std::multimap<std::string, std::string> needles;
    const std::regex needle("One of the special magic [a-z]+ for ([^ ]+) is: ([^ .]+)\\.");
    for (auto it = std::sregex_iterator(p.begin(), p.end(), needle); it != std::sregex_iterator(); ++it)
      needles.emplace((*it)[1], (*it)[2]);
    std::smatch q;
    const std::string question = p.substr(p.rfind('\n'));
    ASSERT_TRUE(std::regex_search(question, q, std::regex("magic [a-z]+ for (.+) mentioned in the provided text\\?")));
    std::vector<std::string> keys;
    std::string query = q[1];
    for (size_t at; (at = query.find(", ")) != std::string::npos;) keys.push_back(query.substr(0, at)), query = query.substr(at + 2);
    keys.push_back(query.rfind("and ", 0) == 0 ? query.substr(4) : query);
    std::vector<std::string> expected;
    for (const std::string& k : keys) {
      EXPECT_GE(needles.count(k), 1u) << "no needle for " << k;
      for (auto [it, end] = needles.equal_range(k); it != end; ++it) expected.push_back(it->second);
    }
    EXPECT_EQ(asSet(ex.answers), asSet(expected));
    EXPECT_EQ(ex.answers.size(), expected.size());
  } else if (task == "vt") {
    const std::string main = p.substr(p.rfind("Memorize and track"));
    std::map<std::string, std::string> assigned;  // variable -> value or "VAR name"
    const std::regex statement("VAR ([A-Z]+) = (VAR [A-Z]+|[0-9]+)");
    for (auto it = std::sregex_iterator(main.begin(), main.end(), statement); it != std::sregex_iterator(); ++it)
      assigned[(*it)[1]] = (*it)[2];
    std::smatch v;
    ASSERT_TRUE(std::regex_search(main, v, std::regex("assigned the value ([0-9]+) in the text above")));
    std::vector<std::string> holders;
    for (const auto& [name, rhs] : assigned) {
      std::string value = rhs;
      for (int hops = 0; value.rfind("VAR ", 0) == 0 && hops < 100; ++hops) value = assigned[value.substr(4)];
      if (value == v[1]) holders.push_back(name);
    }
    EXPECT_EQ(asSet(ex.answers), asSet(holders));
    EXPECT_EQ(ex.answers.size(), 5u);
  } else if (task == "cwe") {
    const size_t from = p.rfind("most often.\n") + std::string("most often.\n").size();
    const std::string list = p.substr(from, p.find("\nQuestion:", from) - from);
    std::vector<std::string> words;
    const std::regex item("[0-9]+\\. ([a-z]+)");
    for (auto it = std::sregex_iterator(list.begin(), list.end(), item); it != std::sregex_iterator(); ++it)
      words.push_back((*it)[1]);
    EXPECT_EQ(ex.answers.size(), 10u);
    expectTopWords(countWords(words), ex.answers);
  } else if (task == "fwe") {
    const size_t from = p.find("coded words. ") + std::string("coded words. ").size();
    std::vector<std::string> words;
    for (const std::string& w : splitWords(p.substr(from, p.find("\nQuestion:") - from)))
      if (w != "...") words.push_back(w);
    EXPECT_EQ(ex.answers.size(), 3u);
    expectTopWords(countWords(words), ex.answers);
  } else {
    FAIL() << "no check for " << task;
  }
}

void expectFitsAndRecoverable(const RulerSetup& setup, const std::string& task, int64_t context, int64_t index) {
  SCOPED_TRACE(task + " at " + std::to_string(context) + ", example " + std::to_string(index));
  const RulerExample ex = makeRulerExample(task, setup, context, /*seed=*/11, index);
  const int64_t maxNew = rulerTask(task).maxNew;
  EXPECT_EQ(ex.promptTokens, int64_t(promptIds(*setup.tokenizer, ex.prompt).size()));
  EXPECT_LE(ex.promptTokens + maxNew, context);
  // The haystack grew until the next size would not fit: the prompt fills most of the context.
  constexpr double kFilled = 0.8;
  EXPECT_GE(double(ex.promptTokens + maxNew), kFilled * double(context));
  expectRecoverable(task, ex);
}

class RulerTaskTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RulerTaskTest, PromptsFitTheirContextAndHoldTheirAnswer) {
  auto tok = data::makeByteTokenizer();
  const RulerSetup setup = byteSetup(*tok);
  const std::string task = GetParam();
  for (int64_t context : {1024, 2048}) {
    if ((task == "cwe" || task == "vt") && context == 1024) {
      // A one-shot example and the smallest list (10 words 6 times) / chain (5 statements among
      // 5 noise lines) take more than 1024 bytes.
      EXPECT_THROW(makeRulerExample(task, setup, context, 11, 0), RulerDoesNotFit);
      continue;
    }
    for (int64_t index : {0, 1, 2}) expectFitsAndRecoverable(setup, task, context, index);
  }
}

TEST_P(RulerTaskTest, ExamplesAreDeterministicAndDiffer) {
  auto tok = data::makeByteTokenizer();
  const RulerSetup setup = byteSetup(*tok);
  const std::string task = GetParam();
  const RulerExample a = makeRulerExample(task, setup, 2048, 5, 0), b = makeRulerExample(task, setup, 2048, 5, 0);
  const RulerExample c = makeRulerExample(task, setup, 2048, 5, 1), d = makeRulerExample(task, setup, 2048, 6, 0);
  EXPECT_EQ(a.prompt, b.prompt);
  EXPECT_EQ(a.answers, b.answers);
  EXPECT_NE(a.prompt, c.prompt);
  EXPECT_NE(a.prompt, d.prompt);
}

std::vector<std::string> taskNames() {
  std::vector<std::string> names;
  for (const RulerTaskInfo& t : rulerTasks()) names.push_back(t.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Ruler, RulerTaskTest, ::testing::ValuesIn(taskNames()),
                         [](const auto& info) { return info.param; });

TEST(Ruler, ElevenTasksWithRulersGenerationLengths) {
  ASSERT_EQ(rulerTasks().size(), 11u);
  EXPECT_EQ(rulerTask("niah_multiquery").maxNew, 128);
  EXPECT_EQ(rulerTask("vt").maxNew, 30);
  EXPECT_EQ(rulerTask("cwe").maxNew, 120);
  EXPECT_EQ(rulerTask("fwe").maxNew, 50);
  EXPECT_THROW(rulerTask("qa_1"), std::invalid_argument);
}

TEST(Ruler, SingularAndPluralTemplates) {
  auto tok = data::makeByteTokenizer();
  const RulerSetup setup = byteSetup(*tok);
  const std::string one = makeRulerExample("niah_single_3", setup, 1024, 1, 0).prompt;
  EXPECT_EQ(one.rfind("A special magic uuid is hidden within the following text.", 0), 0u) << one.substr(0, 80);
  EXPECT_NE(one.find("mentioned in the provided text is"), std::string::npos);
  const std::string many = makeRulerExample("niah_multivalue", setup, 1024, 1, 0).prompt;
  EXPECT_EQ(many.rfind("Some special magic numbers are hidden", 0), 0u);
  EXPECT_EQ(many.substr(many.size() - std::string("text are").size()), "text are");
}

TEST(Ruler, TooSmallAContextThrowsWithWhatItNeeds) {
  auto tok = data::makeByteTokenizer();
  const RulerSetup setup = byteSetup(*tok);
  try {
    makeRulerExample("niah_single_1", setup, 200, 1, 0);
    FAIL() << "expected RulerDoesNotFit";
  } catch (const RulerDoesNotFit& e) {
    EXPECT_GT(e.neededTokens(), 200);
  }
  // cwe repeats its common words 30 times from 4096 tokens on, which bytes cannot hold.
  EXPECT_THROW(makeRulerExample("cwe", setup, 4096, 1, 0), RulerDoesNotFit);
}

TEST(Ruler, EssayTasksNeedHaystackText) {
  auto tok = data::makeByteTokenizer();
  const RulerSetup noText{tok.get(), {}};
  EXPECT_THROW(makeRulerExample("niah_single_2", noText, 1024, 1, 0), std::invalid_argument);
  EXPECT_NO_THROW(makeRulerExample("niah_single_1", noText, 1024, 1, 0));  // noise haystack
}

#ifdef LINAC_TEST_SENTENCEPIECE_TRAIN
TEST(Ruler, EveryTaskFitsInASentencePieceTokenizer) {
  testing::TempDir dir;
  std::string text;
  for (const std::string& doc : data::defaultCorpusDocuments()) text += doc + "\n";
  const std::string prefix = dir.str() + "/spm";
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + dir.write("corpus.txt", text) + " --model_prefix=" + prefix +
      " --vocab_size=500 --model_type=bpe --minloglevel=2 --input_sentence_size=2000");
  ASSERT_TRUE(status.ok()) << status.ToString();
  auto tok = data::makeSentencePieceTokenizer(prefix + ".model");
  const RulerSetup setup{tok.get(), splitWords(text)};
  for (const std::string& task : taskNames()) expectFitsAndRecoverable(setup, task, 2048, 0);
}
#endif

/// Answers each known prompt with the first `fraction` of its references.
class TableModel final : public LanguageModel {
 public:
  TableModel(const data::Tokenizer& tok, double fraction) : tok_(tok), fraction_(fraction) {}
  void add(const RulerExample& ex) {
    const size_t keep = size_t(fraction_ * double(ex.answers.size()));
    table_[promptIds(tok_, ex.prompt)] = " " + join(std::vector<std::string>(ex.answers.begin(), ex.answers.begin() + int64_t(keep)));
  }
  std::vector<TokenIds> generate(const std::vector<TokenIds>& prompts, int64_t maxNew, std::optional<int64_t> stop) override {
    EXPECT_TRUE(stop && *stop == tok_.documentSeparator());
    std::vector<TokenIds> out;
    for (const TokenIds& p : prompts) {
      TokenIds ids = table_.count(p) ? tok_.encode(table_.at(p)) : TokenIds{};
      if (int64_t(ids.size()) > maxNew) ids.resize(size_t(maxNew));
      out.push_back(ids);
    }
    return out;
  }
  std::vector<ContinuationScore> score(const std::vector<ContinuationRequest>&) override {
    throw std::logic_error("not used by RULER");
  }

 private:
  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;  // as vt's one-shot answer, within 30 bytes
    return s;
  }
  const data::Tokenizer& tok_;
  double fraction_;
  std::map<TokenIds, std::string> table_;
};

TEST(RulerRun, ScoresByStringMatchAllAndAverages) {
  auto tok = data::makeByteTokenizer();
  const RulerSetup setup = byteSetup(*tok);
  RulerOptions options;
  options.tasks = {"niah_single_1", "niah_multivalue", "vt", "fwe"};
  options.contexts = {2048};
  options.examples = 3;
  options.batch = 2;
  options.seed = 7;
  TableModel all(*tok, 1.0), half(*tok, 0.5);
  for (const std::string& t : options.tasks)
    for (int64_t i = 0; i < options.examples; ++i) {
      all.add(makeRulerExample(t, setup, 2048, options.seed, i));
      half.add(makeRulerExample(t, setup, 2048, options.seed, i));
    }
  for (const RulerScore& s : runRuler(all, setup, options)) {
    EXPECT_EQ(s.examples, 3) << s.task;
    EXPECT_DOUBLE_EQ(s.score, 100.0) << s.task;
  }
  // Half the references of 1, 4, 5 and 3 answers: 0, 2, 2 and 1 found.
  const std::vector<RulerScore> scores = runRuler(half, setup, options);
  ASSERT_EQ(scores.size(), 4u);
  EXPECT_DOUBLE_EQ(scores[0].score, 0.0);
  EXPECT_DOUBLE_EQ(scores[1].score, 50.0);
  EXPECT_DOUBLE_EQ(scores[2].score, 40.0);
  EXPECT_NEAR(scores[3].score, 100.0 / 3.0, 1e-9);
  EXPECT_NEAR(rulerAverage(scores, 2048).first, (0.0 + 50.0 + 40.0 + 100.0 / 3.0) / 4.0, 1e-9);
}

TEST(RulerRun, ReportsTasksThatDoNotFit) {
  auto tok = data::makeByteTokenizer();
  const RulerSetup setup = byteSetup(*tok);
  RulerOptions options;
  options.tasks = {"niah_single_1", "cwe"};
  options.contexts = {1024};
  options.examples = 2;
  TableModel model(*tok, 1.0);
  for (int64_t i = 0; i < 2; ++i) model.add(makeRulerExample("niah_single_1", setup, 1024, 0, i));
  std::ostringstream progress;
  options.progress = &progress;
  options.progressEverySeconds = 0;
  const std::vector<RulerScore> scores = runRuler(model, setup, options);
  ASSERT_EQ(scores.size(), 2u);
  EXPECT_TRUE(scores[0].fits());
  EXPECT_FALSE(scores[1].fits());
  EXPECT_GT(scores[1].neededTokens, 1024);
  EXPECT_NE(progress.str().find("4/4 examples (100.0%)"), std::string::npos) << progress.str();

  std::ostringstream table;
  printRulerTable(table, scores);
  EXPECT_NE(table.str().find("niah_single_1"), std::string::npos);
  EXPECT_NE(table.str().find("100.0"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("over the 1 of 2 tasks that fit"), std::string::npos) << table.str();
  const auto lines = rulerJson(scores);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["task"], "ruler/niah_single_1");
  EXPECT_EQ(lines[0]["score"], 100.0);
  EXPECT_EQ(lines[1]["fits"], false);
  EXPECT_EQ(lines[2]["task"], "ruler/average");
  EXPECT_EQ(lines[2]["tasks"], 1);
}

}  // namespace
}  // namespace linac::tasks
