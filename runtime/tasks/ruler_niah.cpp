// RULER's needle-in-a-haystack family (scripts/data/synthetic/niah.py and synthetic.yaml).
#include "tasks/ruler_common.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace linac::tasks::detail {
namespace {

enum class Haystack { Noise, Essay, Needles };
enum class Kind { Words, Numbers, Uuids };

struct NiahConfig {
  std::string_view task;
  Haystack haystack;
  Kind key, value;
  int keys, values, queries;
};

// RULER's synthetic.yaml; keys = max(keys, queries) as niah.py makes it.
constexpr std::array<NiahConfig, 8> kConfigs{{
    {"niah_single_1", Haystack::Noise, Kind::Words, Kind::Numbers, 1, 1, 1},
    {"niah_single_2", Haystack::Essay, Kind::Words, Kind::Numbers, 1, 1, 1},
    {"niah_single_3", Haystack::Essay, Kind::Words, Kind::Uuids, 1, 1, 1},
    {"niah_multikey_1", Haystack::Essay, Kind::Words, Kind::Numbers, 4, 1, 1},
    {"niah_multikey_2", Haystack::Needles, Kind::Words, Kind::Numbers, 1, 1, 1},
    {"niah_multikey_3", Haystack::Needles, Kind::Uuids, Kind::Uuids, 1, 1, 1},
    {"niah_multivalue", Haystack::Essay, Kind::Words, Kind::Numbers, 1, 4, 1},
    {"niah_multiquery", Haystack::Essay, Kind::Words, Kind::Numbers, 4, 1, 4},
}};

constexpr int kNumberDigits = 7;
constexpr int kDepthCount = 40;  // needles go at one of 40 evenly spaced depths, 0% to 100%

std::string draw(Rng& rng, Kind kind) {
  switch (kind) {
    case Kind::Words: return randomWordPair(rng);
    case Kind::Numbers: return randomNumber(rng, kNumberDigits);
    case Kind::Uuids: return randomUuid(rng);
  }
  return {};
}

std::string plural(Kind kind) {
  switch (kind) {
    case Kind::Words: return "words";
    case Kind::Numbers: return "numbers";
    case Kind::Uuids: return "uuids";
  }
  return {};
}

std::string needle(Kind value, const std::string& key, const std::string& v) {
  return "One of the special magic " + plural(value) + " for " + key + " is: " + v + ".";
}

bool endsSentence(const std::string& word) {
  size_t end = word.size();
  while (end > 0 && (word[end - 1] == '"' || word[end - 1] == '\'' || word[end - 1] == ')')) --end;
  return end > 0 && (word[end - 1] == '.' || word[end - 1] == '!' || word[end - 1] == '?');
}

/// The first `count` haystack words (cycled), as sentences.
std::vector<std::string> essaySentences(const std::vector<std::string>& words, int64_t count) {
  std::vector<std::string> sentences;
  std::string current;
  for (int64_t i = 0; i < count; ++i) {
    const std::string& w = words[size_t(i) % words.size()];
    current += (current.empty() ? "" : " ") + w;
    if (endsSentence(w)) sentences.push_back(std::move(current)), current.clear();
  }
  if (!current.empty()) sentences.push_back(std::move(current));
  return sentences;
}

/// Needles at sentence boundaries chosen by depth, as niah.py does for essays.
std::string essayContext(Rng& rng, const std::vector<std::string>& words, int64_t count,
                         const std::vector<std::string>& needles) {
  const std::vector<std::string> sentences = essaySentences(words, count);
  const int64_t n = int64_t(sentences.size());
  std::vector<int64_t> cuts;
  for (int64_t d : sampleDistinct(rng, kDepthCount, int64_t(needles.size()))) {
    const double depth = std::round(100.0 * double(d) / double(kDepthCount - 1));  // percent
    cuts.push_back(int64_t(double(n) * depth / 100.0));
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::string> parts;
  int64_t from = 0;
  for (size_t i = 0; i <= needles.size(); ++i) {
    const int64_t to = i < needles.size() ? cuts[i] : n;
    if (to > from) parts.push_back(join({sentences.begin() + from, sentences.begin() + to}, " "));
    if (i < needles.size()) parts.push_back(needles[i]);
    from = std::max(from, to);
  }
  return join(parts, " ");
}

/// Needles among `lines` (one per line) at distinct random positions.
std::string lineContext(Rng& rng, const std::vector<std::string>& lines, const std::vector<std::string>& needles) {
  std::vector<int64_t> at = sampleDistinct(rng, int64_t(lines.size()), int64_t(needles.size()));
  std::sort(at.begin(), at.end());
  std::vector<std::string> out;
  size_t next = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (next < at.size() && at[next] == int64_t(i)) out.push_back(needles[next++]);
    out.push_back(lines[i]);
  }
  return join(out, "\n");
}

std::string queryText(const std::vector<std::string>& queries) {
  if (queries.size() == 1) return queries[0];
  return join({queries.begin(), queries.end() - 1}, ", ") + ", and " + queries.back();
}

std::string prompt(const NiahConfig& c, const std::string& context, const std::string& query) {
  const std::string many = plural(c.value);
  if (c.queries * c.values == 1) {
    const std::string one = many.substr(0, many.size() - 1);
    return "A special magic " + one + " is hidden within the following text. Make sure to memorize it. I will quiz "
           "you about the " + one + " afterwards.\n" + context + "\nWhat is the special magic " + one + " for " +
           query + " mentioned in the provided text? The special magic " + one + " for " + query +
           " mentioned in the provided text is";
  }
  return "Some special magic " + many + " are hidden within the following text. Make sure to memorize it. I will "
         "quiz you about the " + many + " afterwards.\n" + context + "\nWhat are all the special magic " + many +
         " for " + query + " mentioned in the provided text? The special magic " + many + " for " + query +
         " mentioned in the provided text are";
}

}  // namespace

RulerExample makeNiah(const std::string& task, const RulerSetup& setup, int64_t context, uint64_t seed, int64_t index) {
  const auto it = std::find_if(kConfigs.begin(), kConfigs.end(), [&](const NiahConfig& c) { return c.task == task; });
  if (it == kConfigs.end()) throw std::invalid_argument("not a needle task: " + task);
  const NiahConfig& c = *it;
  if (c.haystack == Haystack::Essay && setup.haystackWords.empty())
    throw std::invalid_argument(task + " needs haystack text (the run's corpus or --haystack)");
  const int keyCount = std::max(c.keys, c.queries);
  auto build = [&](int64_t size) {
    Rng rng(seed, taskStream(task) + uint64_t(index));
    std::vector<std::string> keys, needles, answers;
    std::vector<std::vector<std::string>> values(static_cast<size_t>(keyCount));
    for (int k = 0; k < keyCount; ++k) {
      std::string key = draw(rng, c.key);
      while (std::find(keys.begin(), keys.end(), key) != keys.end()) key = draw(rng, c.key);
      keys.push_back(key);
      for (int v = 0; v < c.values; ++v) {
        std::string value = draw(rng, c.value);
        while (std::find(values[size_t(k)].begin(), values[size_t(k)].end(), value) != values[size_t(k)].end())
          value = draw(rng, c.value);
        values[size_t(k)].push_back(value);
        needles.push_back(needle(c.value, key, value));
      }
    }
    rng.shuffle(needles);
    std::vector<std::string> queries;
    for (int64_t k : sampleDistinct(rng, keyCount, c.queries)) {
      queries.push_back(keys[size_t(k)]);
      answers.insert(answers.end(), values[size_t(k)].begin(), values[size_t(k)].end());
    }
    std::string text;
    if (c.haystack == Haystack::Essay) {
      text = essayContext(rng, setup.haystackWords, size, needles);
    } else {
      std::vector<std::string> lines;
      for (int64_t i = 0; i < size; ++i) {
        if (c.haystack == Haystack::Noise) {
          lines.push_back(kNoiseSentence);
          continue;
        }
        std::string key = draw(rng, c.key);
        while (std::find(keys.begin(), keys.end(), key) != keys.end()) key = draw(rng, c.key);
        lines.push_back(needle(c.value, key, draw(rng, c.value)));
      }
      text = lineContext(rng, lines, needles);
    }
    return Built{prompt(c, text, queryText(queries)), answers};
  };
  const int64_t needleCount = int64_t(keyCount) * c.values;
  return fitToContext(setup, task, context, rulerTask(task).maxNew, needleCount, context, build);
}

}  // namespace linac::tasks::detail
