// Walking expression trees without recursion. A sum of n terms is a chain n nodes deep, so every
// analysis of an expression goes through these (or an explicit stack of its own) and none can
// exhaust the stack, whatever the size.
#pragma once

#include "linac/Spec/Spec.h"

#include <span>
#include <utility>
#include <vector>

namespace linac::spec {

/// Calls `visit(node)` for every node of `root`, parents before their operands, operands left to
/// right (the order a recursive pre-order walk would take).
template <typename Visit>
void forEachNode(const Expr& root, Visit&& visit) {
  std::vector<const Expr*> stack{&root};
  while (!stack.empty()) {
    const Expr* node = stack.back();
    stack.pop_back();
    visit(*node);
    for (auto it = node->args.rbegin(); it != node->args.rend(); ++it) stack.push_back(it->get());
  }
}

/// Computes a value for `root` bottom-up: `eval(node, operands)` gets the values of node.args, in
/// order, and returns the node's. Operands are evaluated left to right, each completely before
/// the next.
template <typename T, typename Eval>
T foldExpr(const Expr& root, Eval&& eval) {
  struct Frame {
    const Expr* node;
    size_t next;
  };
  std::vector<Frame> stack{{&root, 0}};
  std::vector<T> values;
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.next < top.node->args.size()) {
      const Expr* operand = top.node->args[top.next++].get();
      stack.push_back({operand, 0});
      continue;
    }
    const Expr& node = *top.node;
    stack.pop_back();
    const size_t n = node.args.size();
    T value = eval(node, std::span<const T>(values.data() + values.size() - n, n));
    values.erase(values.end() - static_cast<std::ptrdiff_t>(n), values.end());
    values.push_back(std::move(value));
  }
  return std::move(values.back());
}

}  // namespace linac::spec
