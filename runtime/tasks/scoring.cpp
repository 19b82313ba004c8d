#include "tasks/scoring.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace linac::tasks {
namespace {

std::string lowerAscii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool isSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

constexpr unsigned char kFirstPrintable = 0x20;  // U+0000..U+001F are control characters

}  // namespace

std::string rulerPostprocess(const std::string& generated) {
  std::string s = generated;
  for (char& c : s)
    if (static_cast<unsigned char>(c) < kFirstPrintable) c = '\n';
  size_t begin = 0, end = s.size();
  while (begin < end && isSpace(s[begin])) ++begin;
  while (end > begin && isSpace(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

double stringMatchAll(const std::string& prediction, const std::vector<std::string>& references) {
  if (references.empty()) throw std::invalid_argument("stringMatchAll: no references");
  const std::string pred = lowerAscii(prediction);
  int64_t found = 0;
  for (const std::string& r : references) found += pred.find(lowerAscii(r)) != std::string::npos;
  return double(found) / double(references.size());
}

double stringMatchPart(const std::string& prediction, const std::vector<std::string>& references) {
  if (references.empty()) throw std::invalid_argument("stringMatchPart: no references");
  const std::string pred = lowerAscii(prediction);
  for (const std::string& r : references)
    if (pred.find(lowerAscii(r)) != std::string::npos) return 1.0;
  return 0.0;
}

int64_t utf8Length(const std::string& text) {
  constexpr unsigned char kContinuationMask = 0xC0, kContinuationBits = 0x80;  // 10xxxxxx
  return std::count_if(text.begin(), text.end(), [&](char c) {
    return (static_cast<unsigned char>(c) & kContinuationMask) != kContinuationBits;
  });
}

int64_t argmaxFirst(const std::vector<double>& values) {
  if (values.empty()) throw std::invalid_argument("argmaxFirst: no values");
  return std::max_element(values.begin(), values.end()) - values.begin();  // first of equal maxima
}

ChoicePrediction predictChoice(const std::vector<double>& logLikelihoods, const std::vector<std::string>& choices) {
  if (logLikelihoods.size() != choices.size() || choices.empty())
    throw std::invalid_argument("predictChoice: need one log-likelihood per choice");
  std::vector<double> normalized(choices.size());
  for (size_t i = 0; i < choices.size(); ++i) {
    const int64_t length = utf8Length(choices[i]);
    if (length == 0) throw std::invalid_argument("predictChoice: choice " + std::to_string(i) + " is empty");
    normalized[i] = logLikelihoods[i] / double(length);
  }
  return {argmaxFirst(logLikelihoods), argmaxFirst(normalized)};
}

}  // namespace linac::tasks
