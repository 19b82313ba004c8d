#include "tasks/ruler.h"

#include "tasks/ruler_common.h"
#include "tasks/words.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace linac::tasks {
namespace detail {

const char* const kNoiseSentence =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

RulerExample fitToContext(const RulerSetup& setup, const std::string& task, int64_t context, int64_t maxNew,
                          int64_t minSize, int64_t maxSize, const Builder& build) {
  const int64_t budget = context - maxNew;
  auto measure = [&](const Built& b) { return int64_t(promptIds(*setup.tokenizer, b.prompt).size()); };
  Built best = build(minSize);
  int64_t bestTokens = measure(best);
  if (bestTokens > budget || minSize > maxSize)
    throw RulerDoesNotFit(task + " does not fit in " + std::to_string(context) + " tokens: its smallest prompt takes " +
                              std::to_string(bestTokens) + " + " + std::to_string(maxNew) + " to generate",
                          bestTokens + maxNew);
  // Invariant: best == build(lo), which fits; sizes >= hi do not fit (or exceed maxSize).
  int64_t lo = minSize, hi = maxSize + 1;
  auto tryFit = [&](int64_t size) {
    Built b = build(size);
    const int64_t tokens = measure(b);
    if (tokens > budget) return false;
    best = std::move(b);
    bestTokens = tokens;
    return true;
  };
  for (int64_t size = std::max(lo * 2, lo + 1); size < hi; size = size * 2) {
    if (!tryFit(size)) {
      hi = size;
      break;
    }
    lo = size;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (tryFit(mid)) lo = mid;
    else hi = mid;
  }
  return RulerExample{best.prompt, best.answers, bestTokens};
}

uint64_t taskStream(const std::string& task) {
  constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull, kFnvPrime = 0x100000001b3ull;  // FNV-1a
  uint64_t h = kFnvOffset;
  for (unsigned char c : task) h = (h ^ c) * kFnvPrime;
  return h;
}

std::vector<int64_t> sampleDistinct(Rng& rng, int64_t n, int64_t k) {
  if (k > n) throw std::invalid_argument("sampleDistinct: k > n");
  std::vector<int64_t> pool(static_cast<size_t>(n));
  std::iota(pool.begin(), pool.end(), int64_t{0});
  for (int64_t i = 0; i < k; ++i) std::swap(pool[size_t(i)], pool[size_t(i + int64_t(rng.below(uint64_t(n - i))))]);
  pool.resize(size_t(k));
  return pool;
}

int64_t uniformInt(Rng& rng, int64_t lo, int64_t hi) { return lo + int64_t(rng.below(uint64_t(hi - lo + 1))); }

std::string randomNumber(Rng& rng, int digits) {
  int64_t low = 1;
  for (int i = 1; i < digits; ++i) low *= 10;
  return std::to_string(uniformInt(rng, low, low * 10 - 1));
}

std::string randomUuid(Rng& rng) {
  constexpr char kHex[] = "0123456789abcdef";
  constexpr int kVersionNibble = 12, kVariantNibble = 16, kVersion = 4, kVariantBits = 8;  // RFC 4122
  std::string s;
  for (int i = 0; i < 32; ++i) {
    int nibble = int(rng.below(16));
    if (i == kVersionNibble) nibble = kVersion;
    if (i == kVariantNibble) nibble = kVariantBits | (nibble & 3);
    if (i == 8 || i == 12 || i == 16 || i == 20) s += '-';
    s += kHex[nibble];
  }
  return s;
}

std::string randomWordPair(Rng& rng) {
  const auto adj = adjectives();
  const auto noun = nouns();
  const std::string_view a = adj[rng.below(adj.size())];
  const std::string_view n = noun[rng.below(noun.size())];
  return std::string(a) + "-" + std::string(n);
}

std::string randomLetters(Rng& rng, std::string_view alphabet, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s += alphabet[rng.below(alphabet.size())];
  return s;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

}  // namespace detail

const std::vector<RulerTaskInfo>& rulerTasks() {
  // tokens_to_generate of RULER's scripts/data/synthetic/constants.py; metrics of scripts/eval.
  constexpr int64_t kNiahNew = 128, kVtNew = 30, kCweNew = 120, kFweNew = 50;
  static const std::vector<RulerTaskInfo> tasks = {
      {"niah_single_1", kNiahNew, RulerMetric::MatchAll},   {"niah_single_2", kNiahNew, RulerMetric::MatchAll},
      {"niah_single_3", kNiahNew, RulerMetric::MatchAll},   {"niah_multikey_1", kNiahNew, RulerMetric::MatchAll},
      {"niah_multikey_2", kNiahNew, RulerMetric::MatchAll}, {"niah_multikey_3", kNiahNew, RulerMetric::MatchAll},
      {"niah_multivalue", kNiahNew, RulerMetric::MatchAll}, {"niah_multiquery", kNiahNew, RulerMetric::MatchAll},
      {"vt", kVtNew, RulerMetric::MatchAll},                {"cwe", kCweNew, RulerMetric::MatchAll},
      {"fwe", kFweNew, RulerMetric::MatchAll},
  };
  return tasks;
}

const RulerTaskInfo& rulerTask(const std::string& name) {
  for (const RulerTaskInfo& t : rulerTasks())
    if (t.name == name) return t;
  std::string valid;
  for (const RulerTaskInfo& t : rulerTasks()) valid += (valid.empty() ? "" : ", ") + t.name;
  throw std::invalid_argument("unknown RULER task '" + name + "' (valid: " + valid + ")");
}

TokenIds promptIds(const data::Tokenizer& tokenizer, const std::string& text) {
  TokenIds ids{tokenizer.documentSeparator()};
  const TokenIds body = tokenizer.encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

RulerExample makeRulerExample(const std::string& task, const RulerSetup& setup, int64_t context, uint64_t seed,
                              int64_t index) {
  rulerTask(task);  // validates the name
  if (!setup.tokenizer) throw std::invalid_argument("makeRulerExample: no tokenizer");
  if (task == "vt") return detail::makeVariableTracking(setup, context, seed, index);
  if (task == "cwe") return detail::makeCommonWords(setup, context, seed, index);
  if (task == "fwe") return detail::makeFrequentWords(setup, context, seed, index);
  return detail::makeNiah(task, setup, context, seed, index);
}

std::vector<std::string> splitWords(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

}  // namespace linac::tasks
