#include "oracle/expr_eval.h"

#include <torch/torch.h>

#include <stdexcept>

namespace linac::oracle {
namespace {

class Evaluator {
public:
  Evaluator(const Env& env, const std::vector<spec::DefSpec>& defs) : env_(env), defs_(defs) {}

  torch::Tensor eval(const spec::Expr& e, int depth = 0) {
    if (depth > kMaxDepth) throw std::invalid_argument("oracle: definitions nest too deeply");
    switch (e.kind) {
    case spec::ExprKind::Number:
      return torch::scalar_tensor(e.number, torch::kFloat64);
    case spec::ExprKind::Ref:
      return ref(e, depth);
    case spec::ExprKind::Neg:
      return -eval(*e.args.at(0), depth + 1);
    case spec::ExprKind::Binary: {
      torch::Tensor a = eval(*e.args.at(0), depth + 1), b = eval(*e.args.at(1), depth + 1);
      switch (e.op) {
      case '+': return a + b;
      case '-': return a - b;
      case '*': return a * b;
      case '/': return a / b;
      }
      throw std::invalid_argument(std::string("oracle: unknown operator ") + e.op);
    }
    case spec::ExprKind::Call:
      return call(e, depth);
    }
    throw std::invalid_argument("oracle: unknown expression kind");
  }

private:
  static constexpr int kMaxDepth = 256;

  torch::Tensor ref(const spec::Expr& e, int depth) {
    if (auto it = env_.find(e.name); it != env_.end()) return it->second;
    for (const auto& d : defs_)
      if (d.name == e.name) return eval(*d.expr, depth + 1);
    throw std::invalid_argument("oracle: no value for '" + e.name + "'");
  }

  torch::Tensor call(const spec::Expr& e, int depth) {
    std::vector<torch::Tensor> a;
    for (const auto& arg : e.args) a.push_back(eval(*arg, depth + 1));
    const std::string& f = e.name;
    if (f == "exp") return torch::exp(a.at(0));
    if (f == "log") return torch::log(a.at(0));
    if (f == "sigmoid") return torch::sigmoid(a.at(0));
    if (f == "logsigmoid") return torch::log_sigmoid(a.at(0));
    if (f == "softplus") return torch::softplus(a.at(0));
    if (f == "silu" || f == "swish") return torch::silu(a.at(0));
    if (f == "tanh") return torch::tanh(a.at(0));
    if (f == "sqrt") return torch::sqrt(a.at(0));
    if (f == "rsqrt") return torch::rsqrt(a.at(0));
    if (f == "abs") return torch::abs(a.at(0));
    if (f == "min") return torch::minimum(a.at(0), a.at(1));
    if (f == "max") return torch::maximum(a.at(0), a.at(1));
    if (f == "clamp") return torch::minimum(torch::maximum(a.at(0), a.at(1)), a.at(2));
    if (f == "pow") return torch::pow(a.at(0), a.at(1));
    throw std::invalid_argument("oracle: unknown function '" + f + "'");
  }

  const Env& env_;
  const std::vector<spec::DefSpec>& defs_;
};

}  // namespace

torch::Tensor evalExpr(const spec::Expr& expr, const Env& env, const std::vector<spec::DefSpec>& defs) {
  return Evaluator(env, defs).eval(expr);
}

}  // namespace linac::oracle
