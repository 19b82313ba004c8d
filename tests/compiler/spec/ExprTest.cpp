// The expression parser: precedence, numbers, locations, errors, and toString round trips.
#include "TestUtil.h"

namespace linac::spec::test {
namespace {

std::string roundTrip(const std::string& text) { return toString(*parseExpr(text, SourceLoc{"e", 1, 1})); }

TEST(Expr, Precedence) {
  EXPECT_EQ(roundTrip("a + b * c"), "(a + (b * c))");
  EXPECT_EQ(roundTrip("a - b - c"), "((a - b) - c)");
  EXPECT_EQ(roundTrip("a / b * c"), "((a / b) * c)");
  EXPECT_EQ(roundTrip("-a * b"), "((-a) * b)");
  EXPECT_EQ(roundTrip("-(a + b)"), "(-(a + b))");
  EXPECT_EQ(roundTrip("a * -b"), "(a * (-b))");
  EXPECT_EQ(roundTrip("--a"), "(-(-a))");
  EXPECT_EQ(roundTrip("clamp(x, 0, 1)"), "clamp(x, 0, 1)");
  EXPECT_EQ(roundTrip("-exp(A_log) * softplus(a + dt_bias)"), "((-exp(A_log)) * softplus((a + dt_bias)))");
}

TEST(Expr, Numbers) {
  auto num = [](const std::string& t) {
    ExprPtr e = parseExpr(t, SourceLoc{"e", 1, 1});
    EXPECT_EQ(e->kind, ExprKind::Number) << t;
    return e->number;
  };
  EXPECT_DOUBLE_EQ(num("1e-3"), 1e-3);
  EXPECT_DOUBLE_EQ(num("2.5E+2"), 250);
  EXPECT_DOUBLE_EQ(num(".5"), 0.5);
  EXPECT_DOUBLE_EQ(num("16"), 16);
  EXPECT_DOUBLE_EQ(num("3."), 3);
}

TEST(Expr, Locations) {
  ExprPtr e = parseExpr("-exp(A_log) * softplus(a + dt_bias)", SourceLoc{"f.yaml", 7, 11});
  ASSERT_EQ(e->kind, ExprKind::Binary);
  EXPECT_EQ(e->loc.col, 11);                       // starts with its left operand, the '-'
  const Expr& call = *e->args[1];
  EXPECT_EQ(call.loc.col, 11 + 14);                // softplus
  EXPECT_EQ(call.args[0]->args[1]->loc.col, 11 + 27);  // dt_bias
  EXPECT_EQ(call.args[0]->args[1]->loc.line, 7);
  ExprPtr m = parseExpr("a +\n  b", SourceLoc{"f.yaml", 3, 5});
  EXPECT_EQ(m->args[1]->loc.line, 4);
  EXPECT_EQ(m->args[1]->loc.col, 3);
}

TEST(Expr, Errors) {
  auto err = [](const std::string& t) { return errorOf([&] { parseExpr(t, SourceLoc{"e", 1, 1}); }); };
  EXPECT_EQ(err("-exp(A_log) * softplus(a +)"), "e:1:27: error: expected an operand, found ')'");
  EXPECT_EQ(err(""), "e:1:1: error: empty expression");
  EXPECT_EQ(err("  "), "e:1:3: error: empty expression");
  EXPECT_EQ(err("a b"), "e:1:3: error: unexpected 'b' after the expression");
  EXPECT_EQ(err("exp(a"), "e:1:6: error: expected ')', found end of expression");
  EXPECT_EQ(err("exp()"), "e:1:5: error: function 'exp' needs arguments");
  EXPECT_EQ(err("a ^ 2"), "e:1:3: error: unexpected '^' after the expression");
  EXPECT_EQ(err("1e"), "e:1:3: error: malformed number: expected exponent digits");
  EXPECT_EQ(err("1e999"), "e:1:1: error: number '1e999' is out of range (float32 numbers are at most 3.4028235e+38)");
  EXPECT_EQ(err("."), "e:1:1: error: malformed number: expected digits");
  EXPECT_EQ(err(std::string(300, '(') + "a" + std::string(300, ')')),
            "e:1:201: error: expression nests deeper than 200 levels");
}

TEST(Expr, ToStringRoundTrips) {
  for (const char* text : {"-exp(A_log) * softplus(a + dt_bias)", "lb + (1 - lb) * sigmoid(fx)", "logsigmoid(gk) / 16",
                           "log(1 - pow(2, -5 - head))", "1e-3 * x - 0.1 / 3", "clamp(-a, -1e20, 2.5)",
                           "a - (b - c)", "a / (b / c)"}) {
    std::string once = roundTrip(text);
    EXPECT_EQ(roundTrip(once), once) << text;
  }
}

}  // namespace
}  // namespace linac::spec::test
