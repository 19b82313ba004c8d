// SpecError's one-line rendering and the did-you-mean suggestions used by every diagnostic.
#include "Internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace linac::spec {
std::string renderDiagnostic(const SourceLoc& loc, const std::string& severity, const std::string& message) {
  // A location without a line (a missing file, a command-line argument) prints the file alone.
  if (loc.line <= 0) return fmt::format("{}: {}: {}", loc.file, severity, message);
  return fmt::format("{}:{}:{}: {}: {}", loc.file, loc.line, loc.col, severity, message);
}

namespace {

std::string lower(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Optimal-string-alignment distance: Levenshtein plus adjacent transpositions, so that the
/// common typo "haeds" is one edit from "heads".
size_t editDistance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

// Words longer than this are not compared: suggestions are for typos, and the quadratic table
// must stay cheap on hostile input.
constexpr size_t kMaxSuggestLength = 64;

}  // namespace

SpecError::SpecError(SourceLoc loc, std::string message)
    : std::runtime_error(renderDiagnostic(loc, "error", message)), loc_(std::move(loc)), message_(std::move(message)) {}

std::string closestMatch(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.empty() || word.size() > kMaxSuggestLength) return "";
  // Allow roughly one edit per three characters, at least one: close enough to be a typo, far
  // enough that 'x' does not suggest 'k'.
  const size_t budget = std::max<size_t>(1, (word.size() + 1) / 3);
  std::string best;
  size_t bestDistance = budget + 1;
  const std::string lw = lower(word);
  for (const std::string& c : candidates) {
    if (c.size() > kMaxSuggestLength) continue;
    size_t dist = lower(c) == lw ? 0 : editDistance(lw, lower(c));
    if (dist < bestDistance && dist < std::max(word.size(), c.size())) {
      best = c;
      bestDistance = dist;
    }
  }
  return best;
}

namespace detail {

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += ", ";
    out += names[i];
  }
  return out;
}

SpecError unknownWord(const SourceLoc& loc, const std::string& noun, const std::string& word,
                      const std::vector<std::string>& valid) {
  std::string msg = fmt::format("unknown {} '{}'", noun, word);
  std::string guess = closestMatch(word, valid);
  if (!guess.empty()) msg += fmt::format("; did you mean '{}'?", guess);
  msg += valid.empty() ? std::string(" (none are defined)") : fmt::format(" (valid: {})", joinNames(valid));
  return SpecError(loc, msg);
}

}  // namespace detail
}  // namespace linac::spec
