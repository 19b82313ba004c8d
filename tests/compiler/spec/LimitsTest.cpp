// Expression size and definition depth (linac/Spec/Limits.h): inputs past the limits get a located
// error naming the limit, quickly; inputs up to the limits, and trees deeper than any limit built
// by hand, are walked, printed and destroyed without recursion.
#include "TestUtil.h"

#include "linac/Spec/ExprWalk.h"
#include "linac/Spec/Limits.h"

namespace linac::spec::test {
namespace {

const std::string kHead =
    "name: x\nheads: 1\nkey_dim: 8\ninputs:\n  q: {extent: key}\n  v: {extent: value}\n  a: {extent: head}\n";

/// "a + a + ... + a" with `terms` terms (2 * terms - 1 nodes).
std::string sum(int terms) {
  std::string text = "a";
  for (int i = 1; i < terms; ++i) text += " + a";
  return text;
}

/// "d<i>", the name of the i-th definition.
std::string def(int i) {
  std::string name = "d";
  return name += std::to_string(i);
}

/// The YAML line defining `d<i>` as `body`.
std::string defineLine(int i, const std::string& body) { return "  " + def(i) + ": \"" + body + "\"\n"; }

/// A spec whose decay is `decay`, after the definitions `defines` (YAML lines).
std::string specWith(const std::string& defines, const std::string& decay) {
  return kHead + (defines.empty() ? "" : "define:\n" + defines) + "recurrence:\n  q: q\n  k: q\n  v: v\n  decay: \"" +
         decay + "\"\n";
}

TEST(Limits, LongFlatSumIsALocatedError) {
  // 32k terms: the 10001st node is the 5001st 'a', at column 1 + 4 * 5000.
  EXPECT_EQ(errorOf([] { parseExpr(sum(32768), SourceLoc{"e", 3, 1}); }),
            "e:3:20001: error: expression has more than 10000 nodes (numbers, names, operators and calls); "
            "that is the limit");
  // The same in a spec, inside a quoted string that starts in column 11.
  EXPECT_EQ(errorOf([] { parseVariant(specWith("", "-" + sum(32768)), "t.yaml"); }),
            "t.yaml:12:20010: error: expression has more than 10000 nodes (numbers, names, operators and calls); "
            "that is the limit");
}

TEST(Limits, TenMegabyteExpressionsEndQuickly) {
  const size_t tenMB = size_t(10) << 20;
  // Mostly blank, over many lines: locations are found without rescanning the text.
  std::string spaced = "a";
  while (spaced.size() < tenMB) spaced += std::string(1000, ' ') + "\n+ a";
  EXPECT_NE(errorOf([&] { parseExpr(spaced, SourceLoc{"e", 1, 1}); }).find("more than 10000 nodes"), std::string::npos);
  std::string blank = "a" + std::string(tenMB, ' ') + "+ a";
  EXPECT_EQ(toString(*parseExpr(blank, SourceLoc{"e", 1, 1})), "(a + a)");
  std::string number(tenMB, '1');
  EXPECT_NE(errorOf([&] { parseExpr(number, SourceLoc{"e", 1, 1}); }).find("is out of range"), std::string::npos);
}

TEST(Limits, ExpressionAtTheLimitIsAccepted) {
  // 5000 terms: 9999 nodes, a chain 5000 deep.
  ExprPtr e = parseExpr(sum(5000), SourceLoc{"e", 1, 1});
  EXPECT_EQ(toString(*e).size(), 5000 + 5 * 4999);  // 'a' 5000 times, "(", " + ", ")" 4999
  EXPECT_EQ(errorOf([] { parseVariant(specWith("", "-" + sum(4999)), "t.yaml"); }), "<no error>");
}

TEST(Limits, DeepDefinitionChainIsALocatedError) {
  // 20000 definitions, each using the previous one; in file order and reversed.
  std::vector<std::string> lines;
  for (int i = 0; i < 20000; ++i) lines.push_back(defineLine(i, i ? def(i - 1) + " + 1" : "a"));
  std::string forward, backward;
  for (size_t i = 0; i < lines.size(); ++i) {
    forward += lines[i];
    backward += lines[lines.size() - 1 - i];
  }
  const std::string expected =
      "error: definition 'd256' starts a chain of 257 definitions, each using the next (through 'd255'); chains "
      "are limited to 256";
  EXPECT_EQ(errorOf([&] { parseVariant(specWith(forward, "-exp(d19999)"), "t.yaml"); }), "t.yaml:265:3: " + expected);
  EXPECT_EQ(errorOf([&] { parseVariant(specWith(backward, "-exp(d19999)"), "t.yaml"); }),
            "t.yaml:19752:3: " + expected);
}

TEST(Limits, DefinitionChainAtTheLimitIsAccepted) {
  std::string defines;
  for (int i = 0; i < limits::kMaxDefineDepth; ++i)
    defines += defineLine(i, i ? def(i - 1) + " * 2" : "a");
  EXPECT_EQ(errorOf([&] { parseVariant(specWith(defines, "-exp(d255)"), "t.yaml"); }), "<no error>");
}

TEST(Limits, SubstitutedDefinitionsAreCountedInTheRole) {
  // Each definition uses the previous one twice: small as written, 2^200 nodes once substituted
  // (what one prologue function would compute). Rejected at once, at the role.
  std::string defines = defineLine(0, "a");
  for (int i = 1; i < 200; ++i) defines += defineLine(i, def(i - 1) + " + " + def(i - 1));
  EXPECT_EQ(errorOf([&] { parseVariant(specWith(defines, "-exp(d199)"), "t.yaml"); }),
            "t.yaml:213:11: error: decay has more than 10000 nodes once its definitions are substituted; that is "
            "the limit");
  // 2 * 4999 + 2 nodes: under the limit.
  EXPECT_EQ(errorOf([] { parseVariant(specWith("  s: \"" + sum(2500) + "\"\n", "-(s + s)"), "t.yaml"); }),
            "<no error>");
  EXPECT_NE(errorOf([] { parseVariant(specWith("  s: \"" + sum(2501) + "\"\n", "-(s + s)"), "t.yaml"); })
                .find("decay has more than 10000 nodes"),
            std::string::npos);
}

/// A chain of `depth` unary minus nodes over a name: deeper than any limit allows, built by hand.
ExprPtr negChain(int depth) {
  auto leaf = std::make_shared<Expr>();
  leaf->kind = ExprKind::Ref;
  leaf->name = "a";
  ExprPtr e = leaf;
  for (int i = 0; i < depth; ++i) {
    auto n = std::make_shared<Expr>();
    n->kind = ExprKind::Neg;
    n->args = {e};
    e = n;
  }
  return e;
}

TEST(Limits, DeepTreesAreWalkedPrintedAndDestroyedWithoutRecursion) {
  // Half a million levels: recursion would need far more than a thread's 8 MB stack.
  const int depth = 500'000;
  ExprPtr e = negChain(depth);
  size_t nodes = 0;
  forEachNode(*e, [&](const Expr&) { ++nodes; });
  EXPECT_EQ(nodes, size_t(depth) + 1);
  EXPECT_EQ(foldExpr<int>(*e, [](const Expr& n, std::span<const int> a) { return n.args.empty() ? 0 : a[0] + 1; }),
            depth);
  EXPECT_EQ(toString(*e).size(), size_t(depth) * 3 + 1);
  // Shared operands are left to their other owners.
  ExprPtr inner = e->args[0]->args[0];
  e.reset();
  EXPECT_EQ(toString(*inner).substr(0, 4), "(-(-");
  inner.reset();
}

}  // namespace
}  // namespace linac::spec::test
