// The expression tree's destruction and printing, both without recursion: a sum of n terms is a
// chain n nodes deep.
#include "linac/Spec/Spec.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>
#include <vector>

namespace linac::spec {

Expr::~Expr() {
  // Operands this node alone owns give up their own operands first, so that each is destroyed
  // with none left and the chain unwinds in this loop instead of down the stack.
  std::vector<std::shared_ptr<const Expr>> pending = std::move(args);
  while (!pending.empty()) {
    std::shared_ptr<const Expr> e = std::move(pending.back());
    pending.pop_back();
    if (e.use_count() == 1) {
      // Sole owner: the node is about to be destroyed, and it was created non-const.
      auto& operands = const_cast<Expr&>(*e).args;
      for (auto& a : operands) pending.push_back(std::move(a));
      operands.clear();
    }
  }
}

std::string toString(const Expr& root) {
  // Pieces still to print, last first: a node, or literal text when `node` is null.
  struct Piece {
    const Expr* node;
    std::string_view text;
  };
  std::string out;
  std::vector<Piece> stack{{&root, {}}};
  while (!stack.empty()) {
    Piece p = stack.back();
    stack.pop_back();
    if (!p.node) {
      out += p.text;
      continue;
    }
    const Expr& e = *p.node;
    switch (e.kind) {
      case ExprKind::Number:
        // fmt's shortest round-trip form: parsing it back gives the same double.
        out += fmt::format("{}", e.number);
        break;
      case ExprKind::Ref:
        out += e.name;
        break;
      case ExprKind::Neg:
        out += "(-";
        stack.push_back({nullptr, ")"});
        stack.push_back({e.args.at(0).get(), {}});
        break;
      case ExprKind::Binary: {
        static constexpr std::string_view kOps[] = {" + ", " - ", " * ", " / "};
        const size_t at = std::string_view("+-*/").find(e.op);
        const std::string_view op = at == std::string_view::npos ? " ? " : kOps[at];
        out += "(";
        stack.push_back({nullptr, ")"});
        stack.push_back({e.args.at(1).get(), {}});
        stack.push_back({nullptr, op});
        stack.push_back({e.args.at(0).get(), {}});
        break;
      }
      case ExprKind::Call:
        out += e.name;
        out += "(";
        stack.push_back({nullptr, ")"});
        for (size_t i = e.args.size(); i-- > 0;) {
          stack.push_back({e.args[i].get(), {}});
          if (i) stack.push_back({nullptr, ", "});
        }
        break;
    }
  }
  return out;
}

}  // namespace linac::spec
