#include "linac/Conversion/ExprToArith.h"

#include "linac/Spec/Diagnostic.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace linac {
namespace {

using mlir::Value;

class ExprLowering {
public:
  ExprLowering(mlir::OpBuilder& b, const RefResolver& resolve, const DefinitionLookup& definitions)
      : b_(b), loc_(b.getUnknownLoc()), resolve_(resolve), definitions_(definitions) {}

  /// Lowers `root` with an explicit stack of the nodes being lowered: a node's ops are created
  /// once its operands' values are known; a reference to a definition lowers the definition's
  /// expression in its place, as a definition is substituted at every use.
  Value lower(const spec::Expr& root, mlir::Location rootLoc) {
    struct Frame {
      const spec::Expr* node;
      mlir::Location loc;
      size_t next = 0;                       // operands lowered so far
      llvm::SmallVector<Value, 3> operands;  // by argument index
      const spec::Expr* definition = nullptr;  // a reference to a definition: what it stands for
    };
    std::vector<Frame> stack;
    std::vector<const spec::Expr*> expanding;  // the definitions being lowered, innermost last
    auto push = [&](const spec::Expr& e, mlir::Location loc) {
      stack.push_back(Frame{&e, loc, 0, llvm::SmallVector<Value, 3>(e.args.size()), nullptr});
    };
    push(root, rootLoc);
    Value result;
    while (!stack.empty()) {
      Frame& f = stack.back();
      const spec::Expr& e = *f.node;
      loc_ = f.loc;
      Value value;
      if (e.kind == spec::ExprKind::Ref) {
        if (f.definition) {  // its expression has been lowered
          value = f.operands.front();
          expanding.pop_back();
        } else if (!(value = resolve_(e.name))) {
          std::optional<Definition> def = definitions_(e.name);
          if (!def) throw spec::SpecError(e.loc, "unknown name '" + e.name + "' in expression");
          if (llvm::is_contained(expanding, def->expr))
            throw spec::SpecError(e.loc, "cyclic definition of '" + e.name + "'");
          f.definition = def->expr;
          f.operands.assign(1, Value());
          expanding.push_back(def->expr);
          push(*def->expr, def->loc);
          continue;
        }
      } else if (f.next < e.args.size()) {
        push(*e.args[operandAt(e, f.next++)], f.loc);
        continue;
      } else {
        value = e.kind == spec::ExprKind::Number ? constant(e.number) : combine(e, f.operands);
      }
      stack.pop_back();
      if (stack.empty()) {
        result = value;
        break;
      }
      Frame& parent = stack.back();
      parent.operands[parent.definition ? 0 : operandAt(*parent.node, parent.next - 1)] = value;
    }
    return result;
  }

private:
  Value constant(double x) {
    return mlir::arith::ConstantOp::create(b_, loc_, b_.getF32FloatAttr(static_cast<float>(x)));
  }
  Value neg(Value x) { return mlir::arith::NegFOp::create(b_, loc_, x); }
  Value add(Value x, Value y) { return mlir::arith::AddFOp::create(b_, loc_, x, y); }
  Value mul(Value x, Value y) { return mlir::arith::MulFOp::create(b_, loc_, x, y); }
  Value div(Value x, Value y) { return mlir::arith::DivFOp::create(b_, loc_, x, y); }
  Value max(Value x, Value y) { return mlir::arith::MaximumFOp::create(b_, loc_, x, y); }
  Value min(Value x, Value y) { return mlir::arith::MinimumFOp::create(b_, loc_, x, y); }
  Value exp(Value x) { return mlir::math::ExpOp::create(b_, loc_, x); }

  /// The argument lowered at step i. The order fixes the order of the ops, and so the generated
  /// code: binary operators, min, max and clamp lower their last operand first (as generated/ was
  /// produced), the other calls their first.
  static size_t operandAt(const spec::Expr& e, size_t i) {
    const bool lastFirst =
        e.kind == spec::ExprKind::Binary ||
        (e.kind == spec::ExprKind::Call && (e.name == "min" || e.name == "max" || e.name == "clamp"));
    return lastFirst ? e.args.size() - 1 - i : i;
  }

  /// The ops of `e` over its lowered operands.
  Value combine(const spec::Expr& e, llvm::ArrayRef<Value> operands) {
    switch (e.kind) {
    case spec::ExprKind::Neg: return neg(operands[0]);
    case spec::ExprKind::Binary: return binary(e.op, operands[0], operands[1], e);
    case spec::ExprKind::Call: return call(e, operands);
    default: break;
    }
    throw spec::SpecError(e.loc, "unhandled expression kind");
  }

  Value binary(char op, Value x, Value y, const spec::Expr& e) {
    switch (op) {
    case '+': return add(x, y);
    case '-': return mlir::arith::SubFOp::create(b_, loc_, x, y);
    case '*': return mul(x, y);
    case '/': return div(x, y);
    }
    throw spec::SpecError(e.loc, std::string("unknown operator '") + op + "'");
  }

  Value sigmoid(Value x) { return div(constant(1.0), add(constant(1.0), exp(neg(x)))); }
  Value softplus(Value x) {
    Value absX = mlir::math::AbsFOp::create(b_, loc_, x);
    Value tail = mlir::math::Log1pOp::create(b_, loc_, exp(neg(absX)));
    return add(max(x, constant(0.0)), tail);
  }

  Value call(const spec::Expr& e, llvm::ArrayRef<Value> args) {
    const std::string& f = e.name;
    auto arity = [&](size_t n) {
      if (args.size() != n)
        throw spec::SpecError(e.loc, "'" + f + "' takes " + std::to_string(n) + " argument(s), got " +
                                         std::to_string(args.size()));
    };
    if (f == "min" || f == "max") {
      arity(2);
      return f == "min" ? min(args[0], args[1]) : max(args[0], args[1]);
    }
    if (f == "pow") {  // x^y = exp(y log x): differentiable with exp/log; needs x > 0
      arity(2);
      return exp(mul(args[1], mlir::math::LogOp::create(b_, loc_, args[0])));
    }
    if (f == "clamp") {
      arity(3);
      return min(max(args[0], args[1]), args[2]);
    }
    arity(1);
    Value x = args[0];
    if (f == "exp") return exp(x);
    if (f == "log") return mlir::math::LogOp::create(b_, loc_, x);
    if (f == "sigmoid") return sigmoid(x);
    if (f == "logsigmoid") return neg(softplus(neg(x)));
    if (f == "softplus") return softplus(x);
    if (f == "silu" || f == "swish") return mul(x, sigmoid(x));
    if (f == "tanh") return mlir::math::TanhOp::create(b_, loc_, x);
    if (f == "sqrt") return mlir::math::SqrtOp::create(b_, loc_, x);
    if (f == "rsqrt") return mlir::math::RsqrtOp::create(b_, loc_, x);
    if (f == "abs") return mlir::math::AbsFOp::create(b_, loc_, x);
    throw spec::SpecError(e.loc, "unknown function '" + f + "'");
  }

  mlir::OpBuilder& b_;
  mlir::Location loc_;  // of the node being lowered
  const RefResolver& resolve_;
  const DefinitionLookup& definitions_;
};

}  // namespace

mlir::Value lowerExprToArith(mlir::OpBuilder& builder, mlir::Location loc, const spec::Expr& expr,
                             const RefResolver& resolve, const DefinitionLookup& definitions) {
  return ExprLowering(builder, resolve, definitions).lower(expr, loc);
}

}  // namespace linac
