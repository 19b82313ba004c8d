#include "linac/Conversion/SpecToLinac.h"

#include "linac/Conversion/ExprToArith.h"
#include "linac/Dialect/Linac/IR/LinacDialect.h"
#include "linac/Dialect/Linac/IR/LinacOps.h"
#include "linac/Spec/Diagnostic.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"

#include <map>
#include <set>

namespace linac {
namespace {

namespace ml = mlir::linac;
using mlir::Value;

ml::Extent toExtent(spec::Extent e) {
  switch (e) {
  case spec::Extent::Scalar: return ml::Extent::scalar;
  case spec::Extent::Head: return ml::Extent::head;
  case spec::Extent::Key: return ml::Extent::key;
  case spec::Extent::Value: return ml::Extent::value;
  case spec::Extent::Hidden: return ml::Extent::hidden;
  }
  return ml::Extent::scalar;
}

ml::Activation toActivation(spec::Activation a) {
  switch (a) {
  case spec::Activation::None: return ml::Activation::none;
  case spec::Activation::Silu: return ml::Activation::silu;
  case spec::Activation::Sigmoid: return ml::Activation::sigmoid;
  case spec::Activation::Relu: return ml::Activation::relu;
  case spec::Activation::Tanh: return ml::Activation::tanh;
  case spec::Activation::Elu1: return ml::Activation::elu1;
  }
  return ml::Activation::none;
}

ml::NormKind toNorm(spec::NormKind n) {
  switch (n) {
  case spec::NormKind::None: return ml::NormKind::none;
  case spec::NormKind::RMSNorm: return ml::NormKind::rmsnorm;
  case spec::NormKind::GroupNorm: return ml::NormKind::groupnorm;
  case spec::NormKind::LayerNorm: return ml::NormKind::layernorm;
  }
  return ml::NormKind::none;
}

ml::InitKind toInit(spec::InitKind k) {
  switch (k) {
  case spec::InitKind::Zeros: return ml::InitKind::zeros;
  case spec::InitKind::Ones: return ml::InitKind::ones;
  case spec::InitKind::Constant: return ml::InitKind::constant;
  case spec::InitKind::Normal: return ml::InitKind::normal;
  case spec::InitKind::Uniform: return ml::InitKind::uniform;
  case spec::InitKind::LogUniform: return ml::InitKind::log_uniform;
  case spec::InitKind::DtBias: return ml::InitKind::dt_bias;
  }
  return ml::InitKind::zeros;
}

/// The arguments an init of kind `k` takes (a; or a, b).
llvm::SmallVector<double> initArgs(const spec::InitSpec& init) {
  switch (init.kind) {
  case spec::InitKind::Zeros:
  case spec::InitKind::Ones: return {};
  case spec::InitKind::Constant:
  case spec::InitKind::Normal: return {init.a};
  case spec::InitKind::Uniform:
  case spec::InitKind::LogUniform:
  case spec::InitKind::DtBias: return {init.a, init.b};
  }
  return {};
}

/// The names that can stand at the leaves of an expression and are not definitions.
const std::set<std::string> kIndexNames = {"head", "layer", "num_layers"};

/// Builds the body of one linac.variant.
class VariantBuilder {
public:
  VariantBuilder(mlir::OpBuilder& b, const spec::VariantSpec& v) : b_(b), v_(v) {
    for (const auto& d : v.defs) defs_[d.name] = &d;
  }

  mlir::Location loc(const spec::SourceLoc& l) {
    return mlir::FileLineColLoc::get(b_.getContext(), l.file.empty() ? v_.file : l.file, l.line,
                                     l.col);
  }

  void build() {
    auto* ctx = b_.getContext();
    for (const auto& in : v_.inputs) {
      auto type = ml::FieldType::get(ctx, ml::Varying::token, toExtent(in.extent));
      llvm::SmallVector<mlir::NamedAttribute> attrs = {
          b_.getNamedAttr("name", b_.getStringAttr(in.name))};
      if (in.conv) attrs.push_back(b_.getNamedAttr("conv", b_.getI64IntegerAttr(in.conv)));
      if (in.activation != spec::Activation::None)
        attrs.push_back(b_.getNamedAttr(
            "activation", ml::ActivationAttr::get(ctx, toActivation(in.activation))));
      if (in.l2norm) attrs.push_back(b_.getNamedAttr("l2norm", b_.getUnitAttr()));
      if (in.lowRank) attrs.push_back(b_.getNamedAttr("low_rank", b_.getI64IntegerAttr(in.lowRank)));
      if (in.tokenShift) attrs.push_back(b_.getNamedAttr("token_shift", b_.getBoolAttr(true)));
      if (in.rope) attrs.push_back(b_.getNamedAttr("rope", b_.getUnitAttr()));
      if (in.bias) attrs.push_back(b_.getNamedAttr("bias", b_.getUnitAttr()));
      leaves_[in.name] = ml::InputOp::create(b_, loc(in.loc), mlir::TypeRange{type},
                                             mlir::ValueRange{}, attrs)
                             .getResult();
    }
    for (const auto& p : v_.params) {
      auto type = ml::FieldType::get(ctx, ml::Varying::constant, toExtent(p.extent));
      llvm::SmallVector<mlir::NamedAttribute> attrs = {
          b_.getNamedAttr("name", b_.getStringAttr(p.name)),
          b_.getNamedAttr("init", ml::InitKindAttr::get(ctx, toInit(p.init.kind))),
          b_.getNamedAttr("init_args", b_.getDenseF64ArrayAttr(initArgs(p.init)))};
      leaves_[p.name] = ml::ParamOp::create(b_, loc(p.loc), mlir::TypeRange{type},
                                            mlir::ValueRange{}, attrs)
                            .getResult();
    }

    const auto& r = v_.recurrence;
    const bool matrix = r.state == spec::StateKind::Matrix;
    Value q = matrix ? field(r.q, "q") : Value();
    Value k = matrix ? field(r.k, "k") : Value();
    Value v = field(r.v, "v");
    Value decay = r.decay ? field(r.decay, "decay") : Value();
    Value beta = r.update == spec::UpdateKind::Delta ? field(r.beta, "beta") : Value();
    Value bonus;
    if (r.readout == spec::ReadoutKind::ExclusiveBonus) {
      auto it = leaves_.find(r.bonus);
      if (it == leaves_.end())
        throw spec::SpecError(r.loc, "bonus '" + r.bonus + "' is not a parameter");
      bonus = it->second;
    }
    // Absent: key_dim^-0.5 at the width the layer is built at (the runtime's).
    mlir::FloatAttr scale = matrix && r.scale ? b_.getF64FloatAttr(*r.scale) : mlir::FloatAttr();

    auto* c = b_.getContext();
    auto resultType = ml::FieldType::get(
        c, ml::Varying::token, matrix ? ml::Extent::value : llvm::cast<ml::FieldType>(v.getType()).getExtent());
    auto rec = ml::RecurrenceOp::create(
        b_, loc(r.loc), resultType, q, k, v, decay, beta, bonus,
        ml::StateKindAttr::get(c, matrix ? ml::StateKind::matrix : ml::StateKind::vector),
        ml::UpdateRuleAttr::get(c, r.update == spec::UpdateKind::Delta ? ml::UpdateRule::delta
                                                                      : ml::UpdateRule::additive),
        ml::ReadoutAttr::get(c, r.readout == spec::ReadoutKind::Inclusive
                                    ? ml::Readout::inclusive
                                    : ml::Readout::exclusive_bonus),
        ml::DecayClassAttr::get(c, ml::DecayClass::unknown),
        ml::AlgorithmAttr::get(c, ml::Algorithm::unselected), scale, mlir::DictionaryAttr(),
        mlir::DictionaryAttr());

    const auto& out = v_.output;
    Value gate = out.gate ? field(out.gate, "gate") : Value();
    Value residual = out.residual ? field(out.residual, "residual") : Value();
    ml::OutputOp::create(b_, loc(out.loc), rec.getResult(),
                         ml::NormKindAttr::get(c, toNorm(out.norm)), gate, residual);
  }

private:
  /// The field computing `e`: a leaf's value directly, otherwise a linac.map over the leaves the
  /// expression reaches once definitions are substituted.
  Value field(const spec::ExprPtr& e, const std::string& role) {
    if (!e) throw spec::SpecError(v_.loc, "missing expression for '" + role + "'");
    const spec::Expr* root = e.get();
    std::set<std::string> seen;
    while (root->kind == spec::ExprKind::Ref && defs_.count(root->name)) {
      if (!seen.insert(root->name).second)
        throw spec::SpecError(root->loc, "cyclic definition of '" + root->name + "'");
      root = defs_.at(root->name)->expr.get();
    }
    if (root->kind == spec::ExprKind::Ref) return leaf(*root);

    std::vector<std::string> names = collectLeaves(*root);
    llvm::SmallVector<Value> operands;
    llvm::SmallVector<mlir::Type> types;
    for (const auto& n : names) {
      operands.push_back(leafByName(n, root->loc));
      types.push_back(operands.back().getType());
    }
    auto type = ml::MapOp::broadcastTypes(b_.getContext(), types);
    if (!type)
      throw spec::SpecError(e->loc, "the operands of '" + role + "' do not broadcast (key, value "
                                    "and hidden extents cannot mix)");
    auto map = ml::MapOp::create(b_, loc(e->loc), mlir::TypeRange{type}, operands,
                                 b_.getStringAttr(role));
    mlir::Block* body = new mlir::Block();
    map.getBody().push_back(body);
    std::map<std::string, Value> args;
    for (size_t i = 0; i < names.size(); ++i)
      args[names[i]] = body->addArgument(b_.getF32Type(), loc(e->loc));
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(body);
    Value result = lowerExprToArith(
        b_, loc(e->loc), *root,
        [&](const std::string& name) {
          auto it = args.find(name);
          return it == args.end() ? Value() : it->second;
        },
        [&](const std::string& name) -> std::optional<Definition> {
          auto d = defs_.find(name);
          if (d == defs_.end()) return std::nullopt;
          return Definition{d->second->expr.get(), loc(d->second->loc)};
        });
    ml::YieldOp::create(b_, loc(e->loc), mlir::ValueRange{result});
    return map.getResult(0);
  }

  /// The names at the leaves of `root` once definitions are substituted, in the order a
  /// left-to-right walk first meets them. Each definition is walked once; no recursion.
  std::vector<std::string> collectLeaves(const spec::Expr& root) {
    std::vector<std::string> out;
    std::set<std::string> walked;  // definitions
    std::vector<const spec::Expr*> stack{&root};
    while (!stack.empty()) {
      const spec::Expr& e = *stack.back();
      stack.pop_back();
      if (e.kind == spec::ExprKind::Ref) {
        if (auto d = defs_.find(e.name); d != defs_.end()) {
          if (walked.insert(e.name).second) stack.push_back(d->second->expr.get());
        } else if (std::find(out.begin(), out.end(), e.name) == out.end()) {
          out.push_back(e.name);
        }
        continue;
      }
      for (auto it = e.args.rbegin(); it != e.args.rend(); ++it) stack.push_back(it->get());
    }
    return out;
  }

  Value leaf(const spec::Expr& ref) { return leafByName(ref.name, ref.loc); }

  Value leafByName(const std::string& name, const spec::SourceLoc& where) {
    if (auto it = leaves_.find(name); it != leaves_.end()) return it->second;
    if (kIndexNames.count(name)) {
      auto* c = b_.getContext();
      auto type = ml::FieldType::get(c, ml::Varying::constant,
                                     name == "head" ? ml::Extent::head : ml::Extent::scalar);
      auto op = ml::IndexOp::create(b_, loc(where), mlir::TypeRange{type}, mlir::ValueRange{},
                                    {b_.getNamedAttr("name", b_.getStringAttr(name))});
      return leaves_[name] = op.getResult();
    }
    throw spec::SpecError(where, "unknown name '" + name + "'");
  }

  mlir::OpBuilder& b_;
  const spec::VariantSpec& v_;
  std::map<std::string, const spec::DefSpec*> defs_;
  std::map<std::string, Value> leaves_;
};

/// The schedule in its canonical text form, which linac.model parses with the front end.
std::string scheduleText(const spec::ScheduleSpec* s) {
  if (!s) return "pure";
  switch (s->kind) {
  case spec::ScheduleKind::Pure: return "pure";
  case spec::ScheduleKind::Transformer: return "transformer";
  case spec::ScheduleKind::Ratio: return std::to_string(s->ratio) + ":1";
  case spec::ScheduleKind::Explicit: {
    if (s->attentionLayers.empty()) return "pure";
    std::string t;
    for (size_t i = 0; i < s->attentionLayers.size(); ++i)
      t += (i ? "," : "") + std::to_string(s->attentionLayers[i]);
    return t;
  }
  }
  return "pure";
}

void buildAttention(mlir::OpBuilder& b, const spec::VariantSpec& a, const spec::PresetSpec& preset,
                    mlir::Location loc) {
  int64_t heads = a.heads;
  int64_t headDim = a.keyDim.resolve(preset.hidden, heads);
  int64_t kv = a.attention.kvHeads ? a.attention.kvHeads : heads;
  llvm::SmallVector<mlir::NamedAttribute> attrs = {
      b.getNamedAttr("sym_name", b.getStringAttr(a.name)),
      b.getNamedAttr("heads", b.getI64IntegerAttr(heads)),
      b.getNamedAttr("kv_heads", b.getI64IntegerAttr(kv)),
      b.getNamedAttr("head_dim", b.getI64IntegerAttr(headDim))};
  if (a.attention.rope) {
    attrs.push_back(b.getNamedAttr("rope", b.getUnitAttr()));
    attrs.push_back(b.getNamedAttr("rope_theta", b.getF64FloatAttr(a.attention.ropeTheta)));
  }
  ml::AttentionOp::create(b, loc, mlir::TypeRange{}, mlir::ValueRange{}, attrs);
}

}  // namespace

void registerDialects(mlir::MLIRContext& context) {
  context.loadDialect<ml::LinacDialect, mlir::arith::ArithDialect, mlir::math::MathDialect>();
}

mlir::OwningOpRef<mlir::ModuleOp> buildModule(mlir::MLIRContext& context,
                                              const spec::VariantSpec& variant,
                                              const ModelContext& model) {
  registerDialects(context);
  if (!model.preset) throw std::invalid_argument("buildModule: a preset is required");
  const spec::PresetSpec& preset = *model.preset;
  mlir::OpBuilder b(&context);
  auto fileLoc = mlir::FileLineColLoc::get(&context, variant.file, variant.loc.line, variant.loc.col);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(fileLoc);
  // What the emitters print in their banners: where the spec came from and its hash.
  (*module)->setAttr(ml::kSpecFileAttrName, b.getStringAttr(variant.file));
  (*module)->setAttr(ml::kSpecHashAttrName, b.getStringAttr(variant.hash));
  b.setInsertionPointToEnd(module->getBody());

  std::string linearName, attentionName;
  if (variant.kind == spec::VariantKind::Attention) {
    buildAttention(b, variant, preset, fileLoc);
    attentionName = variant.name;
  } else {
    int64_t dk = variant.keyDim.resolve(preset.hidden, variant.heads);
    // A vector state has no keys: value_dim is its channel count per head.
    int64_t dv = variant.valueDim.resolve(preset.hidden, variant.heads);
    auto op = ml::VariantOp::create(b, fileLoc, variant.name, variant.heads, dk, dv, mlir::FloatAttr(),
                                    mlir::FloatAttr(), variant.chunk, mlir::StringAttr());
    // A ratio of the model width stays one: the runtime resolves it at its own width.
    if (variant.keyDim.absolute == 0) op.setKeyExpandAttr(b.getF64FloatAttr(variant.keyDim.expand));
    if (variant.valueDim.absolute == 0) op.setValueExpandAttr(b.getF64FloatAttr(variant.valueDim.expand));
    if (!variant.description.empty()) op.setDescriptionAttr(b.getStringAttr(variant.description));
    op.getBody().emplaceBlock();
    mlir::OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&op.getBodyBlock());
    VariantBuilder vb(b, variant);
    vb.build();
    linearName = variant.name;
    if (model.attention && model.attention->name != variant.name) {
      b.setInsertionPointAfter(op);
      buildAttention(b, *model.attention, preset, fileLoc);
      attentionName = model.attention->name;
    }
  }

  std::string schedule = variant.kind == spec::VariantKind::Attention ? "transformer"
                                                                      : scheduleText(model.schedule);
  llvm::SmallVector<mlir::NamedAttribute> attrs = {
      b.getNamedAttr("sym_name", b.getStringAttr("model")),
      b.getNamedAttr("hidden", b.getI64IntegerAttr(preset.hidden)),
      b.getNamedAttr("vocab", b.getI64IntegerAttr(preset.vocab)),
      b.getNamedAttr("num_layers", b.getI64IntegerAttr(preset.layers)),
      b.getNamedAttr("schedule", b.getStringAttr(schedule))};
  if (!linearName.empty())
    attrs.push_back(b.getNamedAttr("linear", mlir::FlatSymbolRefAttr::get(&context, linearName)));
  if (!attentionName.empty())
    attrs.push_back(
        b.getNamedAttr("attention", mlir::FlatSymbolRefAttr::get(&context, attentionName)));
  b.setInsertionPointToEnd(module->getBody());
  ml::ModelOp::create(b, fileLoc, mlir::TypeRange{}, mlir::ValueRange{}, attrs);
  return module;
}

}  // namespace linac
