// Constants: numbers must be float32 numbers, and every constant subexpression (the compiler folds
// them) must fold to a finite float32; a division by a constant zero is an error whatever the
// numerator. Each error points at the node that folds badly.
#include "TestUtil.h"

namespace linac::spec::test {
namespace {

/// The error of a spec whose decay is `decay`, after the definition lines `defines`. Without
/// definitions the decay string starts at line 14, column 11.
std::string decayError(const std::string& decay, const std::string& defines = "") {
  const std::string text = "name: x\nheads: 1\nkey_dim: 8\ninputs:\n  q: {extent: key}\n  v: {extent: value}\n"
                           "  a: {extent: head}\nparams:\n  A: {extent: head}\n" +
                           (defines.empty() ? "" : "define:\n" + defines) + "recurrence:\n  q: q\n  k: q\n  v: v\n" +
                           "  decay: \"" + decay + "\"\n";
  return errorOf([&] { parseVariant(text, "t.yaml"); });
}

TEST(Constants, FoldingToInfOrNanIsALocatedError) {
  const std::string tail = ", which is not a finite float32 number";
  EXPECT_EQ(decayError("log(0)"), "t.yaml:14:11: error: 'log(0)' folds to -inf" + tail);
  EXPECT_EQ(decayError("-exp(1000)"), "t.yaml:14:12: error: 'exp(1000)' folds to inf" + tail);
  // Finite as a double, past float32.
  EXPECT_EQ(decayError("-a * exp(100)"), "t.yaml:14:16: error: 'exp(100)' folds to 2.688117e+43" + tail);
  EXPECT_EQ(decayError("a * (1e30 * 1e30)"), "t.yaml:14:16: error: '(1e+30 * 1e+30)' folds to 1e+60" + tail);
  EXPECT_EQ(decayError("a * log(-1)"), "t.yaml:14:15: error: 'log((-1))' folds to nan" + tail);
  EXPECT_EQ(decayError("-a * sqrt(-1)"), "t.yaml:14:16: error: 'sqrt((-1))' folds to nan" + tail);
  EXPECT_EQ(decayError("-a * rsqrt(0)"), "t.yaml:14:16: error: 'rsqrt(0)' folds to inf" + tail);
  // In a definition: reported there, not where it is used.
  EXPECT_EQ(decayError("-a * c", "  c: \"exp(100)\"\n"),
            "t.yaml:11:7: error: 'exp(100)' folds to 2.688117e+43" + tail);
}

TEST(Constants, DivisionByAConstantZero) {
  EXPECT_EQ(decayError("-a / 0"), "t.yaml:14:16: error: division by zero: the divisor '0' is the constant 0");
  EXPECT_EQ(decayError("-a / (1 - 1)"), "t.yaml:14:17: error: division by zero: the divisor '(1 - 1)' is the constant 0");
  EXPECT_EQ(decayError("-a / c", "  c: \"2 - 2\"\n"),
            "t.yaml:16:16: error: division by zero: the divisor 'c' is the constant 0");
  // 1e-60 is 0 in float32.
  EXPECT_EQ(decayError("a / (1e-30 * 1e-30)"),
            "t.yaml:14:16: error: division by zero: the divisor '(1e-30 * 1e-30)' is the constant 0");
}

TEST(Constants, PowNeedsAPositiveBase) {
  EXPECT_EQ(decayError("-pow(0, a)"),
            "t.yaml:14:16: error: pow(x, y) is exp(y * log(x)) and needs x > 0, but x is the constant 0");
  EXPECT_EQ(decayError("-pow(-2, 2)"),
            "t.yaml:14:16: error: pow(x, y) is exp(y * log(x)) and needs x > 0, but x is the constant -2");
}

TEST(Constants, NumbersMustBeFloat32) {
  EXPECT_EQ(decayError("-a * 1e39"),
            "t.yaml:14:16: error: number '1e39' is out of range (float32 numbers are at most 3.4028235e+38)");
  EXPECT_EQ(decayError("-a * 1e-50"),
            "t.yaml:14:16: error: number '1e-50' is too small: it rounds to 0 in float32 (the smallest is 1e-45)");
  EXPECT_EQ(errorOf([] { parseExpr(std::string(100, '9'), SourceLoc{"e", 1, 1}); }),
            "e:1:1: error: number '9999999999999999999999999999999999999...' is out of range (float32 numbers are "
            "at most 3.4028235e+38)");
}

TEST(Constants, FiniteFoldsAreAccepted) {
  for (const char* decay : {"-exp(-1000) * a", "-sigmoid(-100) * a", "-a / 2", "log(1 - pow(2, -5 - head))",
                            "-pow(2, a)", "-(a * 1e30) * 1e30", "a * 0", "-3.4e38 + a", "0 * log(1e-45)"})
    EXPECT_EQ(decayError(decay), "<no error>") << decay;
}

}  // namespace
}  // namespace linac::spec::test
