// Checks over a parsed variant's expressions: every name resolves, calls have the right arity,
// definitions are acyclic and nest within the limit, operands have compatible extents, constants
// fold to finite float32 numbers, each prologue function stays within the size limit, and the
// decay is not provably positive (it is a log-space decay, g <= 0). No recursion: expressions are
// walked with ExprWalk.h, definitions in dependency order.
#include "Internal.h"
#include "linac/Spec/ExprWalk.h"
#include "linac/Spec/Limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <map>
#include <optional>
#include <span>

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

// ----- constants ------------------------------------------------------------------------------
// Prologue functions compute in float32 and the compiler folds operations on constants, so a
// constant operand that is inf or nan would be printed into the generated code. Every constant
// subexpression is evaluated here, as ExprToArith.h lowers it, and must be a finite float32.

double sigmoidOf(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplusOf(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

/// The value of a call of the built-in `f` on constants (arity already checked).
double callValue(const std::string& f, const std::vector<double>& x) {
  if (f == "exp") return std::exp(x[0]);
  if (f == "log") return std::log(x[0]);
  if (f == "sigmoid") return sigmoidOf(x[0]);
  if (f == "logsigmoid") return -softplusOf(-x[0]);
  if (f == "softplus") return softplusOf(x[0]);
  if (f == "silu") return x[0] * sigmoidOf(x[0]);
  if (f == "tanh") return std::tanh(x[0]);
  if (f == "sqrt") return std::sqrt(x[0]);
  if (f == "rsqrt") return 1.0 / std::sqrt(x[0]);
  if (f == "abs") return std::fabs(x[0]);
  if (f == "min") return std::fmin(x[0], x[1]);
  if (f == "max") return std::fmax(x[0], x[1]);
  if (f == "clamp") return std::fmin(std::fmax(x[0], x[1]), x[2]);
  if (f == "pow") return std::exp(x[1] * std::log(x[0]));
  return std::nan("");
}

/// A folded value, to float32's precision.
std::string valueText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.7g}", v);
}

// ----- names ----------------------------------------------------------------------------------

enum class NameKind { Input, Param, Def, Builtin };

struct Name {
  NameKind kind;
  Extent extent = Extent::Scalar;
  Sign sign = kAny;
  size_t def = 0;  // Def: its index in VariantSpec::defs
};

bool broadcastsTo(Extent from, Extent to) {
  if (from == to || from == Extent::Scalar) return true;
  return from == Extent::Head && (to == Extent::Key || to == Extent::Value);
}

/// What the analysis knows about one node (a definition's: about its expression).
struct Facts {
  Extent extent = Extent::Scalar;
  Sign sign = kAny;
  std::optional<double> value;  // the folded float32 value, when the node is a constant
  int64_t size = 1;             // nodes with definitions substituted, counted up to the limit + 1
};

int64_t addSizes(int64_t a, int64_t b) { return std::min(a + b, limits::kMaxExprNodes + 1); }

class Analyzer {
public:
  explicit Analyzer(const VariantSpec& spec) : spec_(spec) {
    // Built-ins: the layer's place in the model and its sizes, all constants per layer.
    names_["head"] = {NameKind::Builtin, Extent::Head, kZero | kPos};
    for (const std::string& n : kBuiltinScalars) names_[n] = {NameKind::Builtin, Extent::Scalar, kPos};
    names_["layer"].sign = kZero | kPos;  // 0-based
    for (const InputSpec& in : spec.inputs) names_[in.name] = {NameKind::Input, in.extent, inputSign(in)};
    for (const ParamSpec& p : spec.params) names_[p.name] = {NameKind::Param, p.extent, kAny};
    for (size_t i = 0; i < spec.defs.size(); ++i)
      names_[spec.defs[i].name] = {NameKind::Def, Extent::Scalar, kAny, i};
  }

  void run() {
    for (const DefSpec& d : spec_.defs) checkNames(*d.expr);
    // Each definition is analysed once, after the ones it uses: a reference reads their facts.
    defFacts_.resize(spec_.defs.size());
    for (size_t d : orderDefinitions()) defFacts_[d] = facts(*spec_.defs[d].expr);
    if (spec_.kind == VariantKind::Attention) return;
    const RecurrenceSpec& r = spec_.recurrence;
    for (const ExprPtr* e : {&r.q, &r.k, &r.v, &r.decay, &r.beta, &spec_.output.gate, &spec_.output.residual})
      if (*e) checkNames(**e);

    const bool matrix = r.state == StateKind::Matrix;
    if (matrix) {
      role(*r.q, "recurrence q", {Extent::Key});
      role(*r.k, "recurrence k", {Extent::Key});
    }
    role(*r.v, "recurrence v", {Extent::Value});
    if (r.decay) {
      // The decay multiplies the state along its key axis (matrix) or its channels (vector).
      Extent channel = matrix ? Extent::Key : Extent::Value;
      if (role(*r.decay, "decay", {Extent::Scalar, Extent::Head, channel}).sign == kPos)
        throw SpecError(r.decay->loc,
                        fmt::format("decay '{}' is provably positive, but it is a log-space decay and "
                                    "must be <= 0; did you mean '-{}'?",
                                    toString(*r.decay), toString(*r.decay)));
    }
    if (r.beta) role(*r.beta, "beta", {Extent::Scalar, Extent::Head});
    if (spec_.output.gate)
      role(*spec_.output.gate, "output gate", {Extent::Scalar, Extent::Head, Extent::Value, Extent::Hidden});
    if (spec_.output.residual)
      role(*spec_.output.residual, "output residual", {Extent::Scalar, Extent::Head, Extent::Value});
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

  void checkNames(const Expr& root) {
    forEachNode(root, [&](const Expr& e) {
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
    });
  }

  /// The definitions in an order where each comes after those it uses. Throws on a cycle and on
  /// a chain of definitions longer than the limit. Depth-first, with an explicit stack.
  std::vector<size_t> orderDefinitions() const {
    const std::vector<DefSpec>& defs = spec_.defs;
    // The definitions each one uses, in the order they appear in its expression.
    std::vector<std::vector<size_t>> uses(defs.size());
    for (size_t d = 0; d < defs.size(); ++d)
      forEachNode(*defs[d].expr, [&](const Expr& e) {
        if (e.kind != ExprKind::Ref) return;
        auto it = names_.find(e.name);
        if (it != names_.end() && it->second.kind == NameKind::Def) uses[d].push_back(it->second.def);
      });

    enum Color { White, Grey, Black };
    std::vector<Color> color(defs.size(), White);
    std::vector<int> depth(defs.size(), 0);  // the longest chain of definitions starting at each
    std::vector<size_t> order;
    struct Frame {
      size_t def, next;
    };
    for (size_t root = 0; root < defs.size(); ++root) {
      if (color[root] != White) continue;
      std::vector<Frame> path{{root, 0}};
      color[root] = Grey;
      while (!path.empty()) {
        Frame& top = path.back();
        if (top.next < uses[top.def].size()) {
          const size_t next = uses[top.def][top.next++];
          if (color[next] == Grey) {
            auto from = std::find_if(path.begin(), path.end(), [&](const Frame& f) { return f.def == next; });
            std::string text;
            for (auto it = from; it != path.end(); ++it) text += defs[it->def].name + " -> ";
            throw SpecError(defs[next].loc, "cyclic definition: " + text + defs[next].name);
          }
          if (color[next] == White) {
            color[next] = Grey;
            path.push_back({next, 0});
          }
          continue;
        }
        const size_t d = top.def;
        path.pop_back();
        size_t through = d;
        for (size_t u : uses[d])
          if (through == d || depth[u] > depth[through]) through = u;
        depth[d] = through == d ? 1 : depth[through] + 1;
        if (depth[d] > limits::kMaxDefineDepth)
          throw SpecError(defs[d].loc,
                          fmt::format("definition '{}' starts a chain of {} definitions, each using the next "
                                      "(through '{}'); chains are limited to {}",
                                      defs[d].name, depth[d], defs[through].name, limits::kMaxDefineDepth));
        color[d] = Black;
        order.push_back(d);
      }
    }
    return order;
  }

  Extent join(Extent a, Extent b, const Expr& at, const char* what) const {
    if (broadcastsTo(a, b)) return b;
    if (broadcastsTo(b, a)) return a;
    throw SpecError(at.loc, fmt::format("cannot combine a {}-extent operand with a {}-extent operand in {}",
                                        extentName(a), extentName(b), what));
  }

  /// A folded value, which must be a finite float32 (as the compiler will fold it), rounded to one.
  static double checkedConstant(const Expr& e, double v) {
    if (!std::isfinite(v) || std::fabs(v) > FLT_MAX)
      throw SpecError(e.loc, fmt::format("'{}' folds to {}, which is not a finite float32 number",
                                         toString(e), valueText(v)));
    return static_cast<float>(v);
  }

  Facts facts(const Expr& root) const {
    return foldExpr<Facts>(root, [&](const Expr& e, std::span<const Facts> a) {
      Facts f;
      for (const Facts& operand : a) f.size = addSizes(f.size, operand.size);
      switch (e.kind) {
        case ExprKind::Number:
          f.sign = signOf(e.number);
          f.value = checkedConstant(e, e.number);
          return f;
        case ExprKind::Ref: {
          const Name& n = names_.at(e.name);
          if (n.kind == NameKind::Def) return defFacts_[n.def];  // substituted: its size, not 1
          f.extent = n.extent;
          f.sign = n.sign;
          return f;
        }
        case ExprKind::Neg:
          f.extent = a[0].extent;
          f.sign = negSign(a[0].sign);
          if (a[0].value) f.value = -*a[0].value;
          return f;
        case ExprKind::Binary: {
          const char what[] = {'\'', e.op, '\'', 0};
          f.extent = join(a[0].extent, a[1].extent, e, what);
          switch (e.op) {
            case '+': f.sign = addSigns(a[0].sign, a[1].sign); break;
            case '-': f.sign = addSigns(a[0].sign, negSign(a[1].sign)); break;
            default: f.sign = mulSigns(a[0].sign, a[1].sign); break;  // '*' and '/' share sign rules
          }
          if (e.op == '/' && a[1].value == 0.0)
            throw SpecError(e.args[1]->loc, fmt::format("division by zero: the divisor '{}' is the constant 0",
                                                        toString(*e.args[1])));
          if (a[0].value && a[1].value) {
            const double x = *a[0].value, y = *a[1].value;
            f.value = checkedConstant(e, e.op == '+' ? x + y : e.op == '-' ? x - y : e.op == '*' ? x * y : x / y);
          }
          return f;
        }
        case ExprKind::Call: {
          const std::string what = fmt::format("{}()", e.name);
          f.extent = a[0].extent;
          for (size_t i = 1; i < a.size(); ++i) f.extent = join(f.extent, a[i].extent, e, what.c_str());
          f.sign = callSign(e.name, a);
          if (e.name == "pow" && a[0].value && *a[0].value <= 0)
            throw SpecError(e.args[0]->loc, fmt::format("pow(x, y) is exp(y * log(x)) and needs x > 0, but x "
                                                        "is the constant {}",
                                                        valueText(*a[0].value)));
          std::vector<double> x;
          for (const Facts& operand : a)
            if (operand.value) x.push_back(*operand.value);
          if (x.size() == a.size()) f.value = checkedConstant(e, callValue(e.name, x));
          return f;
        }
      }
      return f;
    });
  }

  static Sign callSign(const std::string& f, std::span<const Facts> a) {
    if (f == "exp" || f == "sigmoid" || f == "softplus" || f == "rsqrt") return kPos;
    if (f == "logsigmoid") return kNeg;
    if (f == "sqrt" || f == "abs") return kZero | kPos;
    if (f == "silu" || f == "tanh") return a[0].sign;  // both keep the sign
    if (f == "min") return minSigns(a[0].sign, a[1].sign);
    if (f == "max") return maxSigns(a[0].sign, a[1].sign);
    if (f == "clamp") return minSigns(maxSigns(a[0].sign, a[1].sign), a[2].sign);
    if (f == "pow") return a[0].sign == kPos ? kPos : kAny;
    return kAny;  // log and anything else: unknown
  }

  /// The facts of a role's expression (q, k, v, decay, ...): one prologue function, so its size
  /// with definitions substituted is bounded, and its extent must be one of `allowed`.
  Facts role(const Expr& e, const char* what, std::initializer_list<Extent> allowed) const {
    Facts f = facts(e);
    if (f.size > limits::kMaxExprNodes)
      throw SpecError(e.loc, fmt::format("{} has more than {} nodes once its definitions are substituted; "
                                         "that is the limit",
                                         what, limits::kMaxExprNodes));
    for (Extent x : allowed)
      if (f.extent == x) return f;
    std::vector<std::string> names;
    for (Extent x : allowed) names.push_back(extentName(x));
    throw SpecError(e.loc, fmt::format("{} '{}' has {} extent; expected {}", what, toString(e),
                                       extentName(f.extent), joinNames(names)));
  }

  const VariantSpec& spec_;
  std::map<std::string, Name> names_;
  std::vector<Facts> defFacts_;  // by index in spec_.defs
};

}  // namespace

bool isBuiltinName(const std::string& name) {
  return name == "head" || std::find(kBuiltinScalars.begin(), kBuiltinScalars.end(), name) != kBuiltinScalars.end() ||
         functions().count(name);
}

void analyzeVariant(const VariantSpec& spec) { Analyzer(spec).run(); }

}  // namespace linac::spec::detail

namespace linac::spec {

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

}  // namespace linac::spec
