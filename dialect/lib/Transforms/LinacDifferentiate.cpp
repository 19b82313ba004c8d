//===- LinacDifferentiate.cpp - -linac-differentiate -----------------------===//
//
// Reverse-mode differentiation of the scalar bodies of prologue maps that feed
// any operand of a recurrence (q, k, v, decay, beta) or the output's gate and
// residual. The gradient map for a map result
// r over operands x_0..x_{N-1} has N results: dr/dx_i (broadcast type). A map
// without operands (a constant role) gets none.
//
//===----------------------------------------------------------------------===//

#include "linac/Dialect/Linac/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::linac {
#define GEN_PASS_DEF_LINACDIFFERENTIATEPASS
#include "linac/Dialect/Linac/Transforms/Passes.h.inc"
} // namespace mlir::linac

using namespace mlir;
using namespace mlir::linac;

namespace {

/// Builds adjoint expressions at the end of a block.
class Adjoints {
public:
  Adjoints(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  Value cst(double v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  static bool isConst(Value v, double c) {
    FloatAttr::ValueType value(0.0f);
    return matchPattern(v, m_ConstantFloat(&value)) &&
           value.convertToDouble() == c;
  }
  Value add(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) {
    if (isConst(x, 1.0))
      return y;
    if (isConst(y, 1.0))
      return x;
    return arith::MulFOp::create(b, loc, x, y);
  }
  Value div(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  Value neg(Value x) { return arith::NegFOp::create(b, loc, x); }
  Value cmp(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b, loc, p, x, y);
  }
  Value select(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, loc, c, x, y);
  }

  void accumulate(Value v, Value g) {
    auto [it, inserted] = adjoint.try_emplace(v, g);
    if (!inserted)
      it->second = add(it->second, g);
  }
  Value lookup(Value v) { return adjoint.lookup(v); }

  /// Propagates the adjoint `g` of `op`'s result to its operands.
  LogicalResult backprop(Operation *op, Value g) {
    Value r = op->getNumResults() == 1 ? op->getResult(0) : Value();
    auto binary = [&](Value &x, Value &y) {
      x = op->getOperand(0);
      y = op->getOperand(1);
    };
    Value x, y;
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case<arith::ConstantOp, arith::CmpFOp>([&](auto) { return success(); })
        .Case<arith::AddFOp>([&](auto) {
          binary(x, y);
          accumulate(x, g);
          accumulate(y, g);
          return success();
        })
        .Case<arith::SubFOp>([&](auto) {
          binary(x, y);
          accumulate(x, g);
          accumulate(y, neg(g));
          return success();
        })
        .Case<arith::MulFOp>([&](auto) {
          binary(x, y);
          accumulate(x, mul(g, y));
          accumulate(y, mul(g, x));
          return success();
        })
        .Case<arith::DivFOp>([&](auto) {
          binary(x, y);
          accumulate(x, div(g, y));
          accumulate(y, neg(div(mul(g, r), y)));
          return success();
        })
        .Case<arith::NegFOp>([&](auto) {
          accumulate(op->getOperand(0), neg(g));
          return success();
        })
        .Case<arith::MaximumFOp, arith::MaxNumFOp>([&](auto) {
          binary(x, y);
          Value c = cmp(arith::CmpFPredicate::OGE, x, y), zero = cst(0.0);
          accumulate(x, select(c, g, zero));
          accumulate(y, select(c, zero, g));
          return success();
        })
        .Case<arith::MinimumFOp, arith::MinNumFOp>([&](auto) {
          binary(x, y);
          Value c = cmp(arith::CmpFPredicate::OLE, x, y), zero = cst(0.0);
          accumulate(x, select(c, g, zero));
          accumulate(y, select(c, zero, g));
          return success();
        })
        .Case<arith::SelectOp>([&](arith::SelectOp s) {
          Value zero = cst(0.0);
          accumulate(s.getTrueValue(), select(s.getCondition(), g, zero));
          accumulate(s.getFalseValue(), select(s.getCondition(), zero, g));
          return success();
        })
        .Case<math::ExpOp>([&](auto) {
          accumulate(op->getOperand(0), mul(g, r));
          return success();
        })
        .Case<math::ExpM1Op>([&](auto) {
          accumulate(op->getOperand(0), mul(g, add(r, cst(1.0))));
          return success();
        })
        .Case<math::LogOp>([&](auto) {
          accumulate(op->getOperand(0), div(g, op->getOperand(0)));
          return success();
        })
        .Case<math::Log1pOp>([&](auto) {
          accumulate(op->getOperand(0),
                     div(g, add(cst(1.0), op->getOperand(0))));
          return success();
        })
        .Case<math::TanhOp>([&](auto) {
          accumulate(op->getOperand(0), mul(g, sub(cst(1.0), mul(r, r))));
          return success();
        })
        .Case<math::SqrtOp>([&](auto) {
          accumulate(op->getOperand(0), div(mul(g, cst(0.5)), r));
          return success();
        })
        .Case<math::RsqrtOp>([&](auto) {
          // d/dx x^(-1/2) = -1/2 x^(-3/2) = -1/2 r^3
          accumulate(op->getOperand(0),
                     mul(g, mul(cst(-0.5), mul(r, mul(r, r)))));
          return success();
        })
        .Case<math::AbsFOp>([&](auto) {
          Value xv = op->getOperand(0);
          Value c = cmp(arith::CmpFPredicate::OGE, xv, cst(0.0));
          accumulate(xv, select(c, g, neg(g)));
          return success();
        })
        .Case<math::PowFOp>([&](auto) {
          binary(x, y);
          // d/dx x^y = y x^(y-1); d/dy x^y = x^y log x
          Value pm1 = math::PowFOp::create(b, loc, x, sub(y, cst(1.0)));
          accumulate(x, mul(g, mul(y, pm1)));
          accumulate(y, mul(g, mul(r, math::LogOp::create(b, loc, x))));
          return success();
        })
        .Default([&](Operation *other) {
          return other->emitError()
                 << "linac-differentiate: cannot differentiate '"
                 << other->getName() << "'; supported: arith addf subf mulf "
                    "divf negf maximumf minimumf maxnumf minnumf select "
                    "constant cmpf, math exp expm1 log log1p tanh sqrt rsqrt "
                    "absf powf";
        });
  }

private:
  OpBuilder &b;
  Location loc;
  DenseMap<Value, Value> adjoint;
};

/// Creates, after `map` (and any gradient maps already following it), the
/// gradient map of result `index` with role "grad:<name>".
static LogicalResult createGradient(MapOp map, unsigned index, StringRef name) {
  std::string role = ("grad:" + name).str();
  Operation *insertAfter = map;
  // Idempotence: skip if an identical gradient map already follows.
  for (Operation *next = map->getNextNode(); next; next = next->getNextNode()) {
    auto grad = dyn_cast<MapOp>(next);
    if (!grad || !grad.isGradient())
      break;
    insertAfter = grad;
    auto resultAttr = grad->getAttrOfType<IntegerAttr>("result");
    unsigned gradIndex = resultAttr ? resultAttr.getInt() : 0;
    if (grad.getRole() == role && gradIndex == index &&
        grad.getInputs() == map.getInputs())
      return success();
  }

  MLIRContext *ctx = map.getContext();
  Location loc = map.getLoc();
  OpBuilder b(ctx);
  b.setInsertionPointAfter(insertAfter);
  SmallVector<Type> types(map.getInputs().size(),
                          map.getResult(index).getType());
  auto grad =
      MapOp::create(b, loc, types, map.getInputs(), b.getStringAttr(role));
  if (map.getNumResults() > 1)
    grad->setAttr("result", b.getI64IntegerAttr(index));

  Block &src = map.getBodyBlock();
  SmallVector<Type> argTypes(src.getArgumentTypes());
  SmallVector<Location> argLocs(src.getNumArguments(), loc);
  Block *block = b.createBlock(&grad.getBody(), grad.getBody().end(), argTypes, argLocs);
  IRMapping mapping;
  mapping.map(src.getArguments(), block->getArguments());
  SmallVector<Operation *> primal;
  for (Operation &op : src.without_terminator())
    primal.push_back(b.clone(op, mapping));

  Adjoints adj(b, loc);
  adj.accumulate(mapping.lookupOrDefault(map.getYieldedValues()[index]),
                 adj.cst(1.0));
  for (Operation *op : llvm::reverse(primal)) {
    if (op->getNumResults() != 1)
      continue;
    Value g = adj.lookup(op->getResult(0));
    if (!g)
      continue;
    if (failed(adj.backprop(op, g))) {
      grad.erase();
      return failure();
    }
  }
  SmallVector<Value> partials;
  for (BlockArgument arg : block->getArguments()) {
    Value g = adj.lookup(arg);
    partials.push_back(g ? g : adj.cst(0.0));
  }
  YieldOp::create(b, loc, partials);

  // Drop primal ops the derivative does not need.
  SmallVector<Operation *> body;
  for (Operation &op : block->without_terminator())
    body.push_back(&op);
  for (Operation *op : llvm::reverse(body))
    if (op->use_empty() && isMemoryEffectFree(op))
      op->erase();
  return success();
}

struct LinacDifferentiate
    : mlir::linac::impl::LinacDifferentiatePassBase<LinacDifferentiate> {
  void runOnOperation() override {
    struct Target {
      MapOp map;
      unsigned index;
      StringRef name;
    };
    SmallVector<Target> targets;
    getOperation().walk([&](RecurrenceOp op) {
      for (auto [value, name] :
           {std::pair<Value, StringRef>{op.getDecay(), "decay"},
            {op.getBeta(), "beta"},
            {op.getQ(), "q"},
            {op.getK(), "k"},
            {op.getV(), "v"}}) {
        if (!value)
          continue;
        auto map = value.getDefiningOp<MapOp>();
        // A map without operands is a constant (`decay: "-0.5"`): nothing to
        // differentiate, and a gradient map would have no results.
        if (!map || map.isGradient() || map.getInputs().empty())
          continue;
        unsigned index = cast<OpResult>(value).getResultNumber();
        bool seen = llvm::any_of(targets, [&](const Target &t) {
          return t.map == map && t.index == index && t.name == name;
        });
        if (!seen)
          targets.push_back({map, index, name});
      }
    });
    // The epilogue's gate and residual expressions need derivatives for training too.
    getOperation().walk([&](OutputOp op) {
      for (auto [value, name] : {std::pair<Value, StringRef>{op.getGate(), "gate"},
                                 {op.getResidual(), "residual"}}) {
        if (!value)
          continue;
        auto map = value.getDefiningOp<MapOp>();
        // A map without operands is a constant (`decay: "-0.5"`): nothing to
        // differentiate, and a gradient map would have no results.
        if (!map || map.isGradient() || map.getInputs().empty())
          continue;
        unsigned index = cast<OpResult>(value).getResultNumber();
        targets.push_back({map, index, name});
      }
    });
    for (const Target &t : targets)
      if (failed(createGradient(t.map, t.index, t.name)))
        return signalPassFailure();
  }
};

} // namespace
