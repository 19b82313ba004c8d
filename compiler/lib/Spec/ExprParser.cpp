// The expression language: a recursive-descent parser with exact source locations, and
// toString. Grammar (lowest precedence first):
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/') unary)*
//   unary   := '-' unary | primary
//   primary := number | name | name '(' expr (',' expr)* ')' | '(' expr ')'
// Names and functions are resolved later (ExprAnalysis.cpp), where the spec's names are known.
// Recursion is bounded by the nesting limit; a long flat sum is parsed by loops. Parsing is linear
// in the text, and stops at the node limit (Limits.h).
#include "Internal.h"
#include "linac/Spec/Limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>

namespace linac::spec {
namespace detail {
namespace {

using limits::kMaxExprNesting;
using limits::kMaxExprNodes;

class ExprParser {
public:
  ExprParser(std::string_view text, const TextOrigin& origin) : text_(text), origin_(origin) {
    for (size_t i = 0; i < text_.size(); ++i)
      if (text_[i] == '\n') newlines_.push_back(i);
  }

  ExprPtr parse() {
    skipSpace();
    if (pos_ >= text_.size()) throw SpecError(locAt(pos_), "empty expression");
    ExprPtr e = parseSum();
    skipSpace();
    if (pos_ < text_.size()) throw SpecError(locAt(pos_), fmt::format("unexpected {} after the expression", describe(pos_)));
    return e;
  }

private:
  SourceLoc locAt(size_t offset) const {
    offset = std::min(offset, text_.size());
    SourceLoc loc = origin_.start;
    // The newlines before `offset`; the last of them starts the line it is on.
    const auto before = std::lower_bound(newlines_.begin(), newlines_.end(), offset);
    if (before == newlines_.begin()) {
      loc.col += static_cast<int>(offset);
    } else {
      loc.line += static_cast<int>(before - newlines_.begin());
      loc.col = origin_.continuationCol + static_cast<int>(offset - *(before - 1) - 1);
    }
    return loc;
  }

  std::string describe(size_t offset) const {
    if (offset >= text_.size()) return "end of expression";
    return fmt::format("'{}'", text_[offset]);
  }

  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool accept(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  /// Counts a new node against the size limit; `loc` is where the node starts.
  void countNode(const SourceLoc& loc) {
    if (++nodes_ > kMaxExprNodes)
      throw SpecError(loc, fmt::format("expression has more than {} nodes (numbers, names, operators "
                                       "and calls); that is the limit",
                                       kMaxExprNodes));
  }

  std::shared_ptr<Expr> node(ExprKind kind, size_t at) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->loc = locAt(at);
    countNode(e->loc);
    return e;
  }

  struct DepthGuard {
    explicit DepthGuard(ExprParser& p, size_t at) : p(p) {
      if (++p.depth_ > kMaxExprNesting)
        throw SpecError(p.locAt(at), fmt::format("expression nests deeper than {} levels", kMaxExprNesting));
    }
    ~DepthGuard() { --p.depth_; }
    ExprParser& p;
  };

  static ExprPtr binary(char op, ExprPtr lhs, ExprPtr rhs) {
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::Binary;
    e->loc = lhs->loc;  // a binary node starts where its left operand starts
    e->op = op;
    e->args = {std::move(lhs), std::move(rhs)};
    return e;
  }

  ExprPtr parseSum() {
    ExprPtr lhs = parseTerm();
    for (;;) {
      skipSpace();
      if (pos_ >= text_.size() || (text_[pos_] != '+' && text_[pos_] != '-')) return lhs;
      countNode(locAt(pos_));  // the binary node, counted at its operator
      char op = text_[pos_++];
      lhs = binary(op, lhs, parseTerm());
    }
  }

  ExprPtr parseTerm() {
    ExprPtr lhs = parseUnary();
    for (;;) {
      skipSpace();
      if (pos_ >= text_.size() || (text_[pos_] != '*' && text_[pos_] != '/')) return lhs;
      countNode(locAt(pos_));  // the binary node, counted at its operator
      char op = text_[pos_++];
      lhs = binary(op, lhs, parseUnary());
    }
  }

  ExprPtr parseUnary() {
    skipSpace();
    DepthGuard guard(*this, pos_);
    if (pos_ < text_.size() && text_[pos_] == '-') {
      auto e = node(ExprKind::Neg, pos_++);
      e->args = {parseUnary()};
      return e;
    }
    return parsePrimary();
  }

  ExprPtr parsePrimary() {
    skipSpace();
    if (pos_ >= text_.size()) throw SpecError(locAt(pos_), "expected an operand, found end of expression");
    const size_t start = pos_;
    const char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return parseNumber();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
      std::string name(text_.substr(start, pos_ - start));
      if (!accept('(')) {
        auto e = node(ExprKind::Ref, start);
        e->name = std::move(name);
        return e;
      }
      auto e = node(ExprKind::Call, start);
      e->name = std::move(name);
      if (accept(')')) throw SpecError(locAt(pos_ - 1), fmt::format("function '{}' needs arguments", e->name));
      do {
        e->args.push_back(parseSum());
      } while (accept(','));
      expectClose();
      return e;
    }
    if (c == '(') {
      ++pos_;
      ExprPtr inner = parseSum();
      expectClose();
      return inner;
    }
    throw SpecError(locAt(pos_), fmt::format("expected an operand, found {}", describe(pos_)));
  }

  void expectClose() {
    if (!accept(')')) throw SpecError(locAt(pos_), fmt::format("expected ')', found {}", describe(pos_)));
  }

  ExprPtr parseNumber() {
    const size_t start = pos_;
    auto digits = [&] {
      size_t n = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_, ++n;
      return n;
    };
    size_t mantissa = digits();
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      mantissa += digits();
    }
    if (mantissa == 0) throw SpecError(locAt(start), "malformed number: expected digits");
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) throw SpecError(locAt(pos_), "malformed number: expected exponent digits");
    }
    double value = 0;
    std::string_view lexeme = text_.substr(start, pos_ - start);
    // from_chars rejects a leading '.', which the grammar allows.
    std::string spelled = lexeme.front() == '.' ? "0" : "";
    spelled.append(lexeme);
    // Prologue functions compute in float32: a number must be one, and not vanish when rounded.
    const std::string shown = lexeme.size() <= 40 ? std::string(lexeme) : std::string(lexeme.substr(0, 37)) + "...";
    if (!parseDouble(spelled, value) || std::fabs(value) > FLT_MAX)
      throw SpecError(locAt(start), fmt::format("number '{}' is out of range (float32 numbers are at most {})",
                                                shown, FLT_MAX));
    if (value != 0 && static_cast<float>(value) == 0)
      throw SpecError(locAt(start), fmt::format("number '{}' is too small: it rounds to 0 in float32 "
                                                "(the smallest is {})",
                                                shown, FLT_TRUE_MIN));
    auto e = node(ExprKind::Number, start);
    e->number = value;
    return e;
  }

  std::string_view text_;
  TextOrigin origin_;
  std::vector<size_t> newlines_;  // offsets of the '\n's in text_, for locAt
  size_t pos_ = 0;
  int depth_ = 0;
  int64_t nodes_ = 0;
};

}  // namespace

ExprPtr parseExprAt(std::string_view text, const TextOrigin& origin) {
  return ExprParser(text, origin).parse();
}

}  // namespace detail

ExprPtr parseExpr(std::string_view text, const SourceLoc& start) {
  return detail::parseExprAt(text, detail::TextOrigin{start, 1});
}

}  // namespace linac::spec
