// Checks over a parsed variant's expressions: every name resolves, calls have the right arity,
// definitions are acyclic, operands have compatible extents, and the decay is not provably
// positive (it is a log-space decay, g <= 0). Also the rules that tie sections together.
#include "Internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

namespace linac::spec::detail {
namespace {

struct Function {
  size_t minArgs, maxArgs;
};

const std::map<std::string, Function>& functions() {
  static const std::map<std::string, Function> table = {
      {"exp", {1, 1}},     {"log", {1, 1}},   {"sigmoid", {1, 1}}, {"logsigmoid", {1, 1}},
      {"softplus", {1, 1}}, {"silu", {1, 1}}, {"tanh", {1, 1}},    {"sqrt", {1, 1}},
      {"rsqrt", {1, 1}},   {"abs", {1, 1}},   {"min", {2, 2}},     {"max", {2, 2}},
      {"clamp", {3, 3}},   {"pow", {2, 2}},
  };
  return table;
}

// Built-in scalars (besides `head`): the layer's place in the model and its sizes.
const std::vector<std::string> kBuiltinScalars = {"layer", "num_layers", "key_dim", "value_dim", "hidden"};

// ----- signs ----------------------------------------------------------------------------------
// A sign is the set of signs a value may take, as bits; "provably positive" is exactly kPos.
using Sign = unsigned;
constexpr Sign kNeg = 1, kZero = 2, kPos = 4, kAny = kNeg | kZero | kPos;

Sign signOf(double v) { return v > 0 ? kPos : v < 0 ? kNeg : kZero; }
int rank(Sign s) { return s == kNeg ? -1 : s == kZero ? 0 : 1; }
Sign fromRank(int r) { return r < 0 ? kNeg : r == 0 ? kZero : kPos; }

/// Applies f to every pair of single signs and unions the results.
template <typename F>
Sign lift(Sign a, Sign b, F f) {
  Sign out = 0;
  for (Sign x : {kNeg, kZero, kPos})
    for (Sign y : {kNeg, kZero, kPos})
      if ((a & x) && (b & y)) out |= f(x, y);
  return out;
}

Sign addSigns(Sign a, Sign b) {
  return lift(a, b, [](Sign x, Sign y) -> Sign {
    if (x == kZero) return y;
    if (y == kZero || x == y) return x;
    return kAny;  // positive + negative: anything
  });
}
Sign mulSigns(Sign a, Sign b) {
  return lift(a, b, [](Sign x, Sign y) { return fromRank(rank(x) * rank(y)); });
}
Sign minSigns(Sign a, Sign b) {
  return lift(a, b, [](Sign x, Sign y) { return fromRank(std::min(rank(x), rank(y))); });
}
Sign maxSigns(Sign a, Sign b) {
  return lift(a, b, [](Sign x, Sign y) { return fromRank(std::max(rank(x), rank(y))); });
}
Sign negSign(Sign a) { return (a & kZero) | ((a & kNeg) ? kPos : 0) | ((a & kPos) ? kNeg : 0); }

// ----- names ----------------------------------------------------------------------------------

enum class NameKind { Input, Param, Def, Builtin };

struct Name {
  NameKind kind;
  Extent extent = Extent::Scalar;
  Sign sign = kAny;
  const DefSpec* def = nullptr;
};

bool broadcastsTo(Extent from, Extent to) {
  if (from == to || from == Extent::Scalar) return true;
  return from == Extent::Head && (to == Extent::Key || to == Extent::Value);
}

class Analyzer {
public:
  explicit Analyzer(const VariantSpec& spec) : spec_(spec) {
    // Built-ins: the layer's place in the model and its sizes, all constants per layer.
    names_["head"] = {NameKind::Builtin, Extent::Head, kZero | kPos};
    for (const std::string& n : kBuiltinScalars) names_[n] = {NameKind::Builtin, Extent::Scalar, kPos};
    names_["layer"].sign = kZero | kPos;  // 0-based
    for (const InputSpec& in : spec.inputs) names_[in.name] = {NameKind::Input, in.extent, inputSign(in)};
    for (const ParamSpec& p : spec.params) names_[p.name] = {NameKind::Param, p.extent, kAny};
    for (const DefSpec& d : spec.defs) names_[d.name] = {NameKind::Def, Extent::Scalar, kAny, &d};
  }

  void run() {
    for (const DefSpec& d : spec_.defs) checkNames(*d.expr);
    checkCycles();
    for (const DefSpec& d : spec_.defs) defExtent(d);
    if (spec_.kind == VariantKind::Attention) return;
    const RecurrenceSpec& r = spec_.recurrence;
    for (const ExprPtr* e : {&r.q, &r.k, &r.v, &r.decay, &r.beta, &spec_.output.gate, &spec_.output.residual})
      if (*e) checkNames(**e);

    const bool matrix = r.state == StateKind::Matrix;
    if (matrix) {
      expectExtent(*r.q, "recurrence q", {Extent::Key});
      expectExtent(*r.k, "recurrence k", {Extent::Key});
    }
    expectExtent(*r.v, "recurrence v", {Extent::Value});
    if (r.decay) {
      // The decay multiplies the state along its key axis (matrix) or its channels (vector).
      Extent channel = matrix ? Extent::Key : Extent::Value;
      expectExtent(*r.decay, "decay", {Extent::Scalar, Extent::Head, channel});
      if (sign(*r.decay) == kPos)
        throw SpecError(r.decay->loc,
                        fmt::format("decay '{}' is provably positive, but it is a log-space decay and "
                                    "must be <= 0; did you mean '-{}'?",
                                    toString(*r.decay), toString(*r.decay)));
    }
    if (r.beta) expectExtent(*r.beta, "beta", {Extent::Scalar, Extent::Head});
    if (spec_.output.gate)
      expectExtent(*spec_.output.gate, "output gate", {Extent::Scalar, Extent::Head, Extent::Value, Extent::Hidden});
    if (spec_.output.residual)
      expectExtent(*spec_.output.residual, "output residual", {Extent::Scalar, Extent::Head, Extent::Value});
  }

private:
  static Sign inputSign(const InputSpec& in) {
    switch (in.activation) {
      case Activation::Sigmoid:
      case Activation::Elu1: return kPos;
      case Activation::Relu: return kZero | kPos;
      default: return kAny;
    }
  }

  std::vector<std::string> allNames() const {
    std::vector<std::string> out;
    for (const auto& [n, _] : names_) out.push_back(n);
    return out;
  }

  void checkNames(const Expr& e) {
    if (e.kind == ExprKind::Ref && !names_.count(e.name)) {
      if (functions().count(e.name))
        throw SpecError(e.loc, fmt::format("'{}' is a function; call it as {}(...)", e.name, e.name));
      std::string msg = fmt::format("unknown name '{}' in expression", e.name);
      std::string guess = closestMatch(e.name, allNames());
      if (!guess.empty()) msg += fmt::format("; did you mean '{}'?", guess);
      else msg += fmt::format(" (known: {})", joinNames(allNames()));
      throw SpecError(e.loc, msg);
    }
    if (e.kind == ExprKind::Call) {
      auto it = functions().find(e.name);
      if (it == functions().end()) {
        std::vector<std::string> fns;
        for (const auto& [n, _] : functions()) fns.push_back(n);
        throw unknownWord(e.loc, "function", e.name, fns);
      }
      const Function& f = it->second;
      if (e.args.size() < f.minArgs || e.args.size() > f.maxArgs)
        throw SpecError(e.loc, fmt::format("function '{}' takes {} argument{}, got {}", e.name, f.minArgs,
                                           f.minArgs == 1 ? "" : "s", e.args.size()));
    }
    for (const ExprPtr& a : e.args) checkNames(*a);
  }

  void collectDefRefs(const Expr& e, std::vector<const Expr*>& out) const {
    if (e.kind == ExprKind::Ref) {
      auto it = names_.find(e.name);
      if (it != names_.end() && it->second.kind == NameKind::Def) out.push_back(&e);
    }
    for (const ExprPtr& a : e.args) collectDefRefs(*a, out);
  }

  void checkCycles() {
    enum Color { White, Grey, Black };
    std::map<std::string, Color> color;
    std::vector<std::string> path;
    std::function<void(const DefSpec&)> visit = [&](const DefSpec& d) {
      color[d.name] = Grey;
      path.push_back(d.name);
      std::vector<const Expr*> refs;
      collectDefRefs(*d.expr, refs);
      for (const Expr* ref : refs) {
        const DefSpec& next = *names_.at(ref->name).def;
        if (color[next.name] == Grey) {
          auto from = std::find(path.begin(), path.end(), next.name);
          std::vector<std::string> cycle(from, path.end());
          cycle.push_back(next.name);
          std::string text;
          for (size_t i = 0; i < cycle.size(); ++i) text += (i ? " -> " : "") + cycle[i];
          throw SpecError(names_.at(cycle.front()).def->loc, "cyclic definition: " + text);
        }
        if (color[next.name] == White) visit(next);
      }
      path.pop_back();
      color[d.name] = Black;
    };
    for (const DefSpec& d : spec_.defs)
      if (color[d.name] == White) visit(d);
  }

  // Definitions are memoised: a chain of definitions that each use the previous one twice would
  // otherwise be exponential.
  Extent defExtent(const DefSpec& d) {
    auto it = defExtents_.find(d.name);
    if (it != defExtents_.end()) return it->second;
    Extent e = extent(*d.expr);
    defExtents_[d.name] = e;
    return e;
  }

  Extent join(Extent a, Extent b, const Expr& at, const char* what) const {
    if (broadcastsTo(a, b)) return b;
    if (broadcastsTo(b, a)) return a;
    throw SpecError(at.loc, fmt::format("cannot combine a {}-extent operand with a {}-extent operand in {}",
                                        extentName(a), extentName(b), what));
  }

  Extent extent(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Number: return Extent::Scalar;
      case ExprKind::Ref: {
        const Name& n = names_.at(e.name);
        return n.kind == NameKind::Def ? defExtent(*n.def) : n.extent;
      }
      case ExprKind::Neg: return extent(*e.args[0]);
      case ExprKind::Binary: {
        const char what[] = {'\'', e.op, '\'', 0};
        return join(extent(*e.args[0]), extent(*e.args[1]), e, what);
      }
      case ExprKind::Call: {
        Extent out = extent(*e.args[0]);
        const std::string what = fmt::format("{}()", e.name);
        for (size_t i = 1; i < e.args.size(); ++i) out = join(out, extent(*e.args[i]), e, what.c_str());
        return out;
      }
    }
    return Extent::Scalar;
  }

  void expectExtent(const Expr& e, const char* what, std::initializer_list<Extent> allowed) {
    Extent got = extent(e);
    for (Extent a : allowed)
      if (got == a) return;
    std::vector<std::string> names;
    for (Extent a : allowed) names.push_back(extentName(a));
    throw SpecError(e.loc, fmt::format("{} '{}' has {} extent; expected {}", what, toString(e),
                                       extentName(got), joinNames(names)));
  }

  Sign defSign(const DefSpec& d) {
    auto it = defSigns_.find(d.name);
    if (it != defSigns_.end()) return it->second;
    Sign s = sign(*d.expr);
    defSigns_[d.name] = s;
    return s;
  }

  Sign sign(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Number: return signOf(e.number);
      case ExprKind::Ref: {
        const Name& n = names_.at(e.name);
        return n.kind == NameKind::Def ? defSign(*n.def) : n.sign;
      }
      case ExprKind::Neg: return negSign(sign(*e.args[0]));
      case ExprKind::Binary: {
        Sign a = sign(*e.args[0]), b = sign(*e.args[1]);
        switch (e.op) {
          case '+': return addSigns(a, b);
          case '-': return addSigns(a, negSign(b));
          default: return mulSigns(a, b);  // '*' and '/' share sign rules
        }
      }
      case ExprKind::Call: {
        const std::string& f = e.name;
        if (f == "exp" || f == "sigmoid" || f == "softplus" || f == "rsqrt") return kPos;
        if (f == "logsigmoid") return kNeg;
        if (f == "sqrt" || f == "abs") return kZero | kPos;
        if (f == "silu" || f == "tanh") return sign(*e.args[0]);  // both keep the sign
        if (f == "min") return minSigns(sign(*e.args[0]), sign(*e.args[1]));
        if (f == "max") return maxSigns(sign(*e.args[0]), sign(*e.args[1]));
        if (f == "clamp") return minSigns(maxSigns(sign(*e.args[0]), sign(*e.args[1])), sign(*e.args[2]));
        if (f == "pow") return sign(*e.args[0]) == kPos ? kPos : kAny;
        return kAny;  // log and anything else: unknown
      }
    }
    return kAny;
  }

  const VariantSpec& spec_;
  std::map<std::string, Name> names_;
  std::map<std::string, Extent> defExtents_;
  std::map<std::string, Sign> defSigns_;
};

}  // namespace

const char* extentName(Extent e) {
  switch (e) {
    case Extent::Scalar: return "scalar";
    case Extent::Head: return "head";
    case Extent::Key: return "key";
    case Extent::Value: return "value";
    case Extent::Hidden: return "hidden";
  }
  return "?";
}

bool isBuiltinName(const std::string& name) {
  return name == "head" || std::find(kBuiltinScalars.begin(), kBuiltinScalars.end(), name) != kBuiltinScalars.end() ||
         functions().count(name);
}

void analyzeVariant(const VariantSpec& spec) { Analyzer(spec).run(); }

}  // namespace linac::spec::detail
