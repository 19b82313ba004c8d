// RULER's string-match scoring and lm-eval's acc / acc_norm on hand-made cases.
#include "tasks/progress.h"
#include "tasks/scoring.h"

#include <gtest/gtest.h>

#include <sstream>

namespace linac::tasks {
namespace {

TEST(RulerScoring, PostprocessTurnsControlCharactersIntoNewlinesAndStrips) {
  EXPECT_EQ(rulerPostprocess("  1234567.\x01more\t"), "1234567.\nmore");
  EXPECT_EQ(rulerPostprocess("\n\n"), "");
  EXPECT_EQ(rulerPostprocess("a\x1f" "b"), "a\nb");
}

TEST(RulerScoring, MatchAllIsTheFractionOfReferencesFoundIgnoringCase) {
  EXPECT_DOUBLE_EQ(stringMatchAll("The numbers are 123 and 456.", {"123", "456"}), 1.0);
  EXPECT_DOUBLE_EQ(stringMatchAll("The numbers are 123 and 45.", {"123", "456", "789", "12"}), 0.5);
  EXPECT_DOUBLE_EQ(stringMatchAll("VAR ABCDE, var fghij", {"abcde", "FGHIJ", "KLMNO"}), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(stringMatchAll("", {"x"}), 0.0);
  EXPECT_THROW(stringMatchAll("x", {}), std::invalid_argument);
}

TEST(RulerScoring, MatchPartIsOneWhenAnyReferenceIsFound) {
  EXPECT_DOUBLE_EQ(stringMatchPart("answer: Paris", {"london", "PARIS"}), 1.0);
  EXPECT_DOUBLE_EQ(stringMatchPart("answer: Rome", {"london", "paris"}), 0.0);
}

TEST(ChoiceScoring, Utf8LengthCountsCodePoints) {
  EXPECT_EQ(utf8Length("abc"), 3);
  EXPECT_EQ(utf8Length("caf\xc3\xa9"), 4);         // e-acute: 2 bytes, 1 code point
  EXPECT_EQ(utf8Length("\xe2\x82\xac" "5"), 2);    // euro sign: 3 bytes
}

TEST(ChoiceScoring, AccNormDiffersFromAccWhenLengthsDiffer) {
  // Summed log-likelihoods favour the short choice; per character the long one is more likely.
  const std::vector<std::string> choices{"no", "a much longer answer"};  // 2 and 20 characters
  const ChoicePrediction p = predictChoice({-3.0, -10.0}, choices);
  EXPECT_EQ(p.acc, 0);      // -3 > -10
  EXPECT_EQ(p.accNorm, 1);  // -10 / 20 = -0.5 > -3 / 2 = -1.5
  const ChoicePrediction agree = predictChoice({-1.0, -30.0}, choices);  // -0.5 > -1.5 per character too
  EXPECT_EQ(agree.acc, 0);
  EXPECT_EQ(agree.accNorm, 0);
}

TEST(ChoiceScoring, TiesGoToTheFirstChoice) {
  EXPECT_EQ(argmaxFirst({-2.0, -1.0, -1.0}), 1);
  const ChoicePrediction p = predictChoice({-1.0, -10.0}, {"no", "a much longer answer"});
  EXPECT_EQ(p.acc, 0);
  EXPECT_EQ(p.accNorm, 0);  // -1 / 2 and -10 / 20 tie at -0.5
  EXPECT_THROW(predictChoice({-1.0}, {"a", "b"}), std::invalid_argument);
  EXPECT_THROW(predictChoice({-1.0}, {""}), std::invalid_argument);
}

TEST(Progress, PrintsCountsAndAnEstimate) {
  std::ostringstream out;
  Progress p("examples", 4, &out, 0.0);
  p.advance(1, "ruler 1024 vt");
  p.advance(3, "ruler 1024 vt");
  const std::string text = out.str();
  EXPECT_NE(text.find("ruler 1024 vt: 1/4 examples (25.0%)"), std::string::npos) << text;
  EXPECT_NE(text.find("ETA"), std::string::npos) << text;
  EXPECT_NE(text.find("4/4 examples (100.0%)"), std::string::npos) << text;
  EXPECT_EQ(formatDuration(168), "2m 48s");
  EXPECT_EQ(formatDuration(3900), "1h 05m");
}

}  // namespace
}  // namespace linac::tasks
