// RULER's variable tracking (variable_tracking.py), common-word extraction
// (common_words_extraction.py) and frequent-word extraction (freq_words_extraction.py).
#include "tasks/ruler_common.h"
#include "tasks/words.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>

namespace linac::tasks::detail {
namespace {

// --- variable tracking ---------------------------------------------------------------------
constexpr int kChains = 1, kHops = 4;
constexpr int kNameLetters = 5, kOneShotNameLetters = 3;
constexpr int64_t kValueLow = 10000, kValueHigh = 99998;  // numpy randint(10000, 99999)
constexpr int64_t kOneShotContext = 500;                  // tokens of the one-shot example
constexpr std::string_view kUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";

Built trackingExample(Rng& rng, int64_t noiseLines, int nameLetters) {
  std::vector<std::string> names;
  while (names.size() < size_t(kChains * (kHops + 1))) {
    std::string name = randomLetters(rng, kUpper, nameLetters);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::vector<std::string> lines(size_t(noiseLines), kNoiseSentence);
  std::string firstValue;
  for (int c = 0; c < kChains; ++c) {
    const std::string value = std::to_string(uniformInt(rng, kValueLow, kValueHigh));
    if (c == 0) firstValue = value;
    std::vector<std::string> chain{"VAR " + names[size_t(c * (kHops + 1))] + " = " + value};
    for (int h = 0; h < kHops; ++h)
      chain.push_back("VAR " + names[size_t(c * (kHops + 1) + h + 1)] + " = VAR " + names[size_t(c * (kHops + 1) + h)]);
    std::vector<int64_t> at = sampleDistinct(rng, int64_t(lines.size()), int64_t(chain.size()));
    std::sort(at.begin(), at.end());
    for (size_t j = 0; j < chain.size(); ++j) lines.insert(lines.begin() + at[j] + int64_t(j), chain[j]);
  }
  const std::string hops = std::to_string(kHops + 1);
  return Built{"Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n" +
                   join(lines, "\n") + "\nQuestion: Find all variables that are assigned the value " + firstValue +
                   " in the text above. Answer: According to the chain(s) of variable assignment in the text above, " +
                   hops + " variables are assgined the value " + firstValue + ", they are: ",
               {names.begin(), names.begin() + kHops + 1}};
}

// --- common-word extraction ----------------------------------------------------------------
constexpr int kCommonWords = 10;
constexpr int64_t kLongContext = 4096;  // RULER repeats words more often from this context on
struct Repeats {
  int64_t words;  // distinct words of the one-shot example
  int common, uncommon;
};
// (one-shot example, main list) below and from kLongContext, as common_words_extraction.py.
constexpr Repeats kShortExample{20, 3, 1}, kShortList{0, 6, 1}, kLongExample{40, 10, 3}, kLongList{0, 30, 3};

std::vector<std::string> wordPool(uint64_t seed) {
  std::set<std::string> unique;
  for (auto list : {nouns(), adjectives(), verbs()})
    for (std::string_view w : list) unique.emplace(w);
  std::vector<std::string> pool(unique.begin(), unique.end());
  Rng rng(seed, taskStream("cwe/pool"));
  rng.shuffle(pool);
  return pool;
}

std::string numbered(const std::vector<std::string>& words) {
  std::vector<std::string> items;
  for (size_t i = 0; i < words.size(); ++i) items.push_back(std::to_string(i + 1) + ". " + words[i]);
  return join(items, " ");
}

/// The numbered list of `count` distinct words (the first kCommonWords repeated more) and the
/// common words.
std::pair<std::string, std::vector<std::string>> wordList(Rng& rng, const std::vector<std::string>& pool,
                                                          int64_t count, const Repeats& r) {
  std::vector<std::string> common, list;
  const std::vector<int64_t> picked = sampleDistinct(rng, int64_t(pool.size()), count);
  for (int64_t i = 0; i < count; ++i) {
    const std::string& w = pool[size_t(picked[size_t(i)])];
    if (i < kCommonWords) common.push_back(w);
    for (int k = 0; k < (i < kCommonWords ? r.common : r.uncommon); ++k) list.push_back(w);
  }
  rng.shuffle(list);
  return {numbered(list), common};
}

std::string commonWordsPrompt(const std::string& list) {
  return "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
         "that appear most often.\n" + list + "\nQuestion: What are the " + std::to_string(kCommonWords) +
         " most common words in the above list? Answer: The top " + std::to_string(kCommonWords) +
         " words that appear most often in the list are:";
}

// --- frequent-word extraction --------------------------------------------------------------
constexpr int kCodedLetters = 6;
constexpr int64_t kContextPerVocabularyWord = 50;  // RULER: vocabulary size = context // 50
constexpr int kFrequentAnswers = 3;                // ranks 2..4 (rank 1 is the "..." noise word)
constexpr double kZetaTwo = std::numbers::pi * std::numbers::pi / 6.0;  // zeta(alpha), alpha = 2
constexpr std::string_view kLower = "abcdefghijklmnopqrstuvwxyz";

/// Occurrences of the word of rank k (1-based) among `words` words: floor(words k^-2 / zeta(2)).
int64_t zipfCount(int64_t words, int64_t rank) {
  return int64_t(double(words) / (double(rank) * double(rank)) / kZetaTwo);
}

/// The fewest words from which ranks 2 .. kFrequentAnswers + 2 always have strictly decreasing
/// counts (a share gap of g separates the counts once words >= 1 / g), so the answer is unique.
int64_t fewestFrequentWords() {
  double gap = 1.0;
  for (int64_t k = 2; k <= kFrequentAnswers + 1; ++k)
    gap = std::min(gap, (1.0 / double(k * k) - 1.0 / double((k + 1) * (k + 1))) / kZetaTwo);
  return int64_t(std::ceil(1.0 / gap));
}

}  // namespace

RulerExample makeVariableTracking(const RulerSetup& setup, int64_t context, uint64_t seed, int64_t index) {
  const int64_t maxNew = rulerTask("vt").maxNew;
  const int64_t chainLength = kChains * (kHops + 1);
  auto oneShotBuild = [&](int64_t size) {
    Rng rng(seed, taskStream("vt/one-shot"));  // one example for every prompt, as RULER
    return trackingExample(rng, size, kOneShotNameLetters);
  };
  // RULER sizes the one-shot example to 500 tokens of its tokenizer; where that cannot hold the
  // chain among as many noise lines as it has statements (500 bytes cannot), that smallest form.
  Built shot;
  try {
    const RulerExample fitted = fitToContext(setup, "vt", kOneShotContext, maxNew, chainLength, kOneShotContext, oneShotBuild);
    shot = Built{fitted.prompt, fitted.answers};
  } catch (const RulerDoesNotFit&) {
    shot = oneShotBuild(chainLength);
  }
  const std::string prefix = shot.prompt + " " + join(shot.answers, " ") + "\n\n";
  auto build = [&](int64_t size) {
    Rng rng(seed, taskStream("vt") + uint64_t(index));
    Built b = trackingExample(rng, size, kNameLetters);
    b.prompt = prefix + b.prompt;
    return b;
  };
  return fitToContext(setup, "vt", context, maxNew, chainLength, context, build);
}

RulerExample makeCommonWords(const RulerSetup& setup, int64_t context, uint64_t seed, int64_t index) {
  const std::vector<std::string> pool = wordPool(seed);
  const bool longContext = context >= kLongContext;
  const Repeats example = longContext ? kLongExample : kShortExample, list = longContext ? kLongList : kShortList;
  auto build = [&](int64_t size) {
    Rng rng(seed, taskStream("cwe") + uint64_t(index));
    const auto [shotList, shotAnswers] = wordList(rng, pool, example.words, example);
    auto [mainList, answers] = wordList(rng, pool, size, list);
    return Built{commonWordsPrompt(shotList) + " " + numbered(shotAnswers) + "\n" + commonWordsPrompt(mainList),
                 std::move(answers)};
  };
  return fitToContext(setup, "cwe", context, rulerTask("cwe").maxNew, kCommonWords, int64_t(pool.size()), build);
}

RulerExample makeFrequentWords(const RulerSetup& setup, int64_t context, uint64_t seed, int64_t index) {
  const int64_t maxNew = rulerTask("fwe").maxNew;
  const int64_t vocabulary = context / kContextPerVocabularyWord;
  if (vocabulary < kFrequentAnswers + 2)
    throw RulerDoesNotFit("fwe needs a vocabulary of " + std::to_string(kFrequentAnswers + 2) + " coded words: " +
                              std::to_string((kFrequentAnswers + 2) * kContextPerVocabularyWord) + " tokens of context",
                          (kFrequentAnswers + 2) * kContextPerVocabularyWord);
  auto build = [&](int64_t size) {
    Rng rng(seed, taskStream("fwe") + uint64_t(index));
    std::vector<std::string> vocab;
    while (int64_t(vocab.size()) < vocabulary) {
      std::string w = randomLetters(rng, kLower, kCodedLetters);
      if (std::find(vocab.begin(), vocab.end(), w) == vocab.end()) vocab.push_back(w);
    }
    vocab[0] = "...";  // the most frequent "word" is noise
    std::vector<std::string> words;
    for (int64_t k = 0; k < vocabulary; ++k)
      for (int64_t n = 0; n < zipfCount(size, k + 1); ++n) words.push_back(vocab[size_t(k)]);
    rng.shuffle(words);
    return Built{"Read the following coded text and track the frequency of each coded word. Find the three most "
                 "frequently appeared coded words. " + join(words, " ") +
                     "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three "
                     "most frequently appeared words in the above coded text? Answer: According to the coded text "
                     "above, the three most frequently appeared words are:",
                 {vocab.begin() + 1, vocab.begin() + 1 + kFrequentAnswers}};
  };
  return fitToContext(setup, "fwe", context, maxNew, fewestFrequentWords(), context, build);
}

}  // namespace linac::tasks::detail
