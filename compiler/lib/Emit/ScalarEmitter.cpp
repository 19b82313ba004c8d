#include "linac/Emit/ScalarEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Operation.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace linac::emit {
namespace {

/// Shortest decimal that reads back as the same float (with an f suffix for C++). Neither
/// language has a literal for inf or nan: linac-check-constants rejects them first.
std::string floatLiteral(float x, ScalarLanguage language) {
  if (!std::isfinite(x))
    throw std::runtime_error("emit: non-finite constant " + std::to_string(x) + " in a map body");
  char buf[64];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  std::string s(buf);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return language == ScalarLanguage::Cpp ? s + "f" : "torch.tensor(" + s + ")";
}

/// The function of each unary and binary math op, per language.
struct Spelling {
  const char* cpp;
  const char* torch;
  const char* of(ScalarLanguage language) const { return language == ScalarLanguage::Cpp ? cpp : torch; }
};
constexpr Spelling kExp{"expf", "torch.exp"}, kLog{"logf", "torch.log"}, kLog1p{"log1pf", "torch.log1p"},
    kTanh{"tanhf", "torch.tanh"}, kSqrt{"sqrtf", "torch.sqrt"}, kAbs{"fabsf", "torch.abs"},
    kMaximum{"fmaxf", "torch.maximum"}, kMinimum{"fminf", "torch.minimum"}, kMaxNum{"fmaxf", "torch.fmax"},
    kMinNum{"fminf", "torch.fmin"};

std::string predicate(mlir::arith::CmpFPredicate p) {
  using P = mlir::arith::CmpFPredicate;
  switch (p) {
  case P::OGT: case P::UGT: return ">";
  case P::OGE: case P::UGE: return ">=";
  case P::OLT: case P::ULT: return "<";
  case P::OLE: case P::ULE: return "<=";
  case P::OEQ: case P::UEQ: return "==";
  case P::ONE: case P::UNE: return "!=";
  default: break;
  }
  throw std::runtime_error("emit: unsupported arith.cmpf predicate " +
                           mlir::arith::stringifyCmpFPredicate(p).str());
}

}  // namespace

ScalarCode emitScalarBody(mlir::Block& body, const std::vector<std::string>& argNames,
                          ScalarLanguage language) {
  if (argNames.size() != body.getNumArguments())
    throw std::runtime_error("emit: " + std::to_string(argNames.size()) + " names for " +
                             std::to_string(body.getNumArguments()) + " block arguments");
  llvm::DenseMap<mlir::Value, std::string> names;
  for (auto [i, arg] : llvm::enumerate(body.getArguments())) names[arg] = argNames[i];
  const bool cpp = language == ScalarLanguage::Cpp;

  ScalarCode code;
  int next = 0;
  auto name = [&](mlir::Value v) -> const std::string& {
    auto it = names.find(v);
    if (it == names.end()) throw std::runtime_error("emit: value used before it is defined");
    return it->second;
  };
  for (mlir::Operation& op : body.without_terminator()) {
    if (op.getNumResults() != 1)
      throw std::runtime_error("emit: op with " + std::to_string(op.getNumResults()) +
                               " results in a map body: " + op.getName().getStringRef().str());
    auto un = [&](const Spelling& fn) { return std::string(fn.of(language)) + "(" + name(op.getOperand(0)) + ")"; };
    auto bin = [&](const char* sym) {
      return name(op.getOperand(0)) + " " + sym + " " + name(op.getOperand(1));
    };
    auto fn2 = [&](const Spelling& fn) {
      return std::string(fn.of(language)) + "(" + name(op.getOperand(0)) + ", " + name(op.getOperand(1)) + ")";
    };
    std::string rhs;
    std::string type = "float";
    llvm::TypeSwitch<mlir::Operation*>(&op)
        .Case([&](mlir::arith::ConstantOp c) {
          auto f = llvm::dyn_cast<mlir::FloatAttr>(c.getValue());
          if (!f) throw std::runtime_error("emit: non-float constant in a map body");
          rhs = floatLiteral(static_cast<float>(f.getValueAsDouble()), language);
        })
        .Case([&](mlir::arith::AddFOp) { rhs = bin("+"); })
        .Case([&](mlir::arith::SubFOp) { rhs = bin("-"); })
        .Case([&](mlir::arith::MulFOp) { rhs = bin("*"); })
        .Case([&](mlir::arith::DivFOp) { rhs = bin("/"); })
        .Case([&](mlir::arith::NegFOp) { rhs = "-" + name(op.getOperand(0)); })
        .Case([&](mlir::arith::MaximumFOp) { rhs = fn2(kMaximum); })
        .Case([&](mlir::arith::MinimumFOp) { rhs = fn2(kMinimum); })
        .Case([&](mlir::arith::MaxNumFOp) { rhs = fn2(kMaxNum); })
        .Case([&](mlir::arith::MinNumFOp) { rhs = fn2(kMinNum); })
        .Case([&](mlir::arith::CmpFOp c) {
          type = "bool";
          rhs = name(c.getLhs()) + " " + predicate(c.getPredicate()) + " " + name(c.getRhs());
        })
        .Case([&](mlir::arith::SelectOp s) {
          rhs = cpp ? name(s.getCondition()) + " ? " + name(s.getTrueValue()) + " : " + name(s.getFalseValue())
                    : "torch.where(" + name(s.getCondition()) + ", " + name(s.getTrueValue()) + ", " +
                          name(s.getFalseValue()) + ")";
        })
        .Case([&](mlir::math::ExpOp) { rhs = un(kExp); })
        .Case([&](mlir::math::LogOp) { rhs = un(kLog); })
        .Case([&](mlir::math::Log1pOp) { rhs = un(kLog1p); })
        .Case([&](mlir::math::TanhOp) { rhs = un(kTanh); })
        .Case([&](mlir::math::SqrtOp) { rhs = un(kSqrt); })
        .Case([&](mlir::math::RsqrtOp) {
          rhs = cpp ? "1.0f / sqrtf(" + name(op.getOperand(0)) + ")" : "torch.rsqrt(" + name(op.getOperand(0)) + ")";
        })
        .Case([&](mlir::math::AbsFOp) { rhs = un(kAbs); })
        .Default([&](mlir::Operation* other) {
          throw std::runtime_error("emit: cannot print '" + other->getName().getStringRef().str() +
                                   "' in a map body");
        });
    std::string var = "t" + std::to_string(next++);
    code.statements.push_back(cpp ? "const " + type + " " + var + " = " + rhs + ";" : var + " = " + rhs);
    names[op.getResult(0)] = var;
  }
  for (mlir::Value v : body.getTerminator()->getOperands()) code.results.push_back(name(v));
  return code;
}

}  // namespace linac::emit
