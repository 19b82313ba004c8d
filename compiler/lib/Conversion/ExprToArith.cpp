#include "linac/Conversion/ExprToArith.h"

#include "linac/Spec/Diagnostic.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

namespace linac {
namespace {

using mlir::Value;

class ExprLowering {
public:
  ExprLowering(mlir::OpBuilder& b, mlir::Location loc, const RefResolver& resolve)
      : b_(b), loc_(loc), resolve_(resolve) {}

  Value lower(const spec::Expr& e) {
    switch (e.kind) {
    case spec::ExprKind::Number:
      return constant(e.number);
    case spec::ExprKind::Ref: {
      Value v = resolve_(e.name);
      if (!v) throw spec::SpecError(e.loc, "unknown name '" + e.name + "' in expression");
      return v;
    }
    case spec::ExprKind::Neg:
      return neg(lower(*e.args.at(0)));
    case spec::ExprKind::Binary:
      return binary(e.op, lower(*e.args.at(0)), lower(*e.args.at(1)), e);
    case spec::ExprKind::Call:
      return call(e);
    }
    throw spec::SpecError(e.loc, "unhandled expression kind");
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

  Value call(const spec::Expr& e) {
    const std::string& f = e.name;
    auto arity = [&](size_t n) {
      if (e.args.size() != n)
        throw spec::SpecError(e.loc, "'" + f + "' takes " + std::to_string(n) + " argument(s), got " +
                                         std::to_string(e.args.size()));
    };
    auto arg = [&](size_t i) { return lower(*e.args.at(i)); };
    if (f == "min" || f == "max") {
      arity(2);
      return f == "min" ? min(arg(0), arg(1)) : max(arg(0), arg(1));
    }
    if (f == "pow") {  // x^y = exp(y log x): differentiable with exp/log; needs x > 0
      arity(2);
      Value x = arg(0), y = arg(1);
      return exp(mul(y, mlir::math::LogOp::create(b_, loc_, x)));
    }
    if (f == "clamp") {
      arity(3);
      return min(max(arg(0), arg(1)), arg(2));
    }
    arity(1);
    Value x = arg(0);
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
  mlir::Location loc_;
  const RefResolver& resolve_;
};

}  // namespace

mlir::Value lowerExprToArith(mlir::OpBuilder& builder, mlir::Location loc, const spec::Expr& expr,
                             const RefResolver& resolve) {
  return ExprLowering(builder, loc, resolve).lower(expr);
}

}  // namespace linac
