//===- LinacOps.cpp - linac operations -------------------------------------===//

#include "linac/Dialect/Linac/IR/LinacOps.h"
#include "linac/Spec/SpecParser.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::linac;

//===----------------------------------------------------------------------===//
// Custom directive: an enum attribute written as a bare keyword.
//===----------------------------------------------------------------------===//

template <typename AttrT>
static ParseResult parseLinacEnum(OpAsmParser &parser, AttrT &attr) {
  using EnumT = decltype(std::declval<AttrT>().getValue());
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<EnumT> value = symbolizeEnum<EnumT>(keyword);
  if (!value)
    return parser.emitError(loc)
           << "unknown " << AttrT::getMnemonic() << " '" << keyword << "'";
  attr = AttrT::get(parser.getContext(), *value);
  return success();
}

template <typename AttrT>
static void printLinacEnum(OpAsmPrinter &printer, Operation *, AttrT attr) {
  using EnumT = decltype(std::declval<AttrT>().getValue());
  printer << stringifyEnum(attr ? attr.getValue() : EnumT{});
}

#define GET_OP_CLASSES
#include "linac/Dialect/Linac/IR/LinacOps.cpp.inc"

static std::string str(FieldType t) {
  return ("!linac.field<" + stringifyVarying(t.getVarying()) + ", " +
          stringifyExtent(t.getExtent()) + ">")
      .str();
}

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

FailureOr<SmallVector<bool>>
mlir::linac::expandSchedule(StringRef schedule, int64_t numLayers,
                            std::string &error) {
  std::optional<std::vector<bool>> layers = ::linac::spec::expandScheduleText(
      std::string_view(schedule.data(), schedule.size()), numLayers, error);
  if (!layers)
    return failure();
  return SmallVector<bool>(layers->begin(), layers->end());
}

//===----------------------------------------------------------------------===//
// VariantOp
//===----------------------------------------------------------------------===//

LogicalResult VariantOp::verify() {
  for (auto [name, value] :
       {std::pair<StringRef, int64_t>{"heads", getHeads()},
        {"key_dim", getKeyDim()},
        {"value_dim", getValueDim()},
        {"chunk", getChunk()}})
    if (value <= 0)
      return emitOpError() << "'" << name << "' must be positive, got "
                           << value;
  return success();
}

//===----------------------------------------------------------------------===//
// AttentionOp / ModelOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  if (getHeads() <= 0 || getKvHeads() <= 0 || getHeadDim() <= 0)
    return emitOpError() << "heads, kv_heads and head_dim must be positive, got "
                         << getHeads() << ", " << getKvHeads() << ", "
                         << getHeadDim();
  if (getHeads() % getKvHeads() != 0)
    return emitOpError() << "heads (" << getHeads()
                         << ") must be a multiple of kv_heads (" << getKvHeads()
                         << ")";
  return success();
}

LogicalResult ModelOp::verify() {
  std::string error;
  FailureOr<SmallVector<bool>> layers =
      expandSchedule(getSchedule(), getNumLayers(), error);
  if (failed(layers))
    return emitOpError() << error;
  bool anyAttention = llvm::is_contained(*layers, true);
  bool anyLinear = llvm::is_contained(*layers, false);
  if (anyAttention && !getAttentionAttr())
    return emitOpError() << "schedule '" << getSchedule()
                         << "' has attention layers but no 'attention' symbol";
  if (anyLinear && !getLinearAttr())
    return emitOpError() << "schedule '" << getSchedule()
                         << "' has linear layers but no 'linear' symbol";
  return success();
}

//===----------------------------------------------------------------------===//
// InputOp / ParamOp / IndexOp
//===----------------------------------------------------------------------===//

LogicalResult InputOp::verify() {
  if (!getType().isToken())
    return emitOpError() << "input \"" << getName()
                         << "\" must vary per token, got " << str(getType());
  if (getConv() < 0 || getLowRank() < 0)
    return emitOpError() << "conv and low_rank must be >= 0, got "
                         << getConv() << " and " << getLowRank();
  return success();
}

LogicalResult ParamOp::verify() {
  if (getType().isToken())
    return emitOpError() << "param \"" << getName()
                         << "\" must be constant over tokens, got "
                         << str(getType());
  return success();
}

LogicalResult IndexOp::verify() {
  FieldType t = getType();
  Extent expected;
  if (getName() == "head")
    expected = Extent::head;
  else if (getName() == "layer" || getName() == "num_layers")
    expected = Extent::scalar;
  else
    return emitOpError() << "unknown index \"" << getName()
                         << "\", expected \"head\", \"layer\" or "
                            "\"num_layers\"";
  if (t.isToken() || t.getExtent() != expected)
    return emitOpError() << "index \"" << getName() << "\" has type "
                         << str(t) << ", expected !linac.field<constant, "
                         << stringifyExtent(expected) << ">";
  return success();
}

//===----------------------------------------------------------------------===//
// MapOp
//===----------------------------------------------------------------------===//

OperandRange MapOp::getYieldedValues() {
  return getBodyBlock().getTerminator()->getOperands();
}

bool MapOp::isGradient() {
  return getRole() && getRole()->starts_with("grad:");
}

FieldType MapOp::broadcastTypes(MLIRContext *ctx, TypeRange types) {
  FieldType result = FieldType::get(ctx, Varying::constant, Extent::scalar);
  for (Type t : types) {
    result = FieldType::broadcast(result, cast<FieldType>(t));
    if (!result)
      return {};
  }
  return result;
}

LogicalResult MapOp::verify() {
  FieldType expected = broadcastTypes(getContext(), getInputs().getTypes());
  if (!expected) {
    InFlightDiagnostic diag = emitOpError()
                              << "operands do not broadcast: extents";
    for (Type t : getInputs().getTypes())
      diag << " " << stringifyExtent(cast<FieldType>(t).getExtent());
    return diag << " (key, value and hidden only broadcast with scalar and "
                   "head)";
  }
  if (getNumResults() == 0)
    return emitOpError() << "must have at least one result";
  for (auto [i, t] : llvm::enumerate(getResultTypes()))
    if (t != expected)
      return emitOpError() << "result " << i << " has type "
                           << str(cast<FieldType>(t))
                           << ", expected the broadcast type " << str(expected);
  return success();
}

LogicalResult MapOp::verifyRegions() {
  Block &block = getBodyBlock();
  if (block.getNumArguments() != getInputs().size())
    return emitOpError() << "body has " << block.getNumArguments()
                         << " arguments, expected one per operand ("
                         << getInputs().size() << ")";
  Type f32 = Float32Type::get(getContext());
  for (BlockArgument arg : block.getArguments())
    if (arg.getType() != f32)
      return emitOpError() << "body argument " << arg.getArgNumber()
                           << " has type " << arg.getType()
                           << ", expected f32";
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield)
    return emitOpError() << "body must end with 'linac.yield'";
  if (yield.getValues().size() != getNumResults())
    return emitOpError() << "body yields " << yield.getValues().size()
                         << " values, expected one per result ("
                         << getNumResults() << ")";
  for (Operation &op : block) {
    StringRef ns = op.getDialect() ? op.getDialect()->getNamespace() : "";
    if (ns != "arith" && ns != "math" && !isa<YieldOp>(op))
      return op.emitOpError()
             << "is not allowed in a 'linac.map' body (only arith and math "
                "ops and 'linac.yield')";
  }
  return success();
}

namespace {
/// Replaces uses of a map result whose body just yields a block argument by
/// the corresponding operand, when the types agree.
struct ForwardIdentityResults : OpRewritePattern<MapOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MapOp op,
                                PatternRewriter &rewriter) const override {
    if (op.isGradient())
      return failure();
    bool changed = false;
    for (auto [result, yielded] :
         llvm::zip(op.getResults(), op.getYieldedValues())) {
      auto arg = dyn_cast<BlockArgument>(yielded);
      if (!arg || result.use_empty())
        continue;
      Value operand = op.getInputs()[arg.getArgNumber()];
      if (operand.getType() != result.getType())
        continue;
      rewriter.replaceAllUsesWith(result, operand);
      changed = true;
    }
    return success(changed);
  }
};

/// Erases unused maps, drops unused results, and drops operands the body does
/// not read when that keeps the broadcast type. Gradient maps are left alone.
struct SimplifyMap : OpRewritePattern<MapOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MapOp op,
                                PatternRewriter &rewriter) const override {
    if (op.isGradient())
      return failure();
    if (op->use_empty()) {
      rewriter.eraseOp(op);
      return success();
    }
    SmallVector<unsigned> liveResults;
    for (OpResult r : op->getResults())
      if (!r.use_empty())
        liveResults.push_back(r.getResultNumber());
    Block &block = op.getBodyBlock();
    // Block arguments read by the body, ignoring yields of dead results.
    auto yield = cast<YieldOp>(block.getTerminator());
    SmallVector<bool> argUsed(block.getNumArguments(), false);
    for (BlockArgument arg : block.getArguments())
      for (OpOperand &use : arg.getUses())
        if (use.getOwner() != yield ||
            llvm::is_contained(liveResults, use.getOperandNumber()))
          argUsed[arg.getArgNumber()] = true;
    // Drop unused operands one by one while the broadcast type is unchanged.
    Type resultType = op.getResult(0).getType();
    SmallVector<bool> keep(op.getInputs().size(), true);
    for (unsigned i = 0; i < keep.size(); ++i) {
      if (argUsed[i])
        continue;
      keep[i] = false;
      SmallVector<Type> kept;
      for (unsigned j = 0; j < keep.size(); ++j)
        if (keep[j])
          kept.push_back(op.getInputs()[j].getType());
      if (MapOp::broadcastTypes(op.getContext(), kept) != resultType)
        keep[i] = true;
    }
    bool dropOperand = llvm::is_contained(keep, false);
    if (!dropOperand && liveResults.size() == op.getNumResults())
      return failure();

    SmallVector<Value> inputs;
    for (unsigned j = 0; j < keep.size(); ++j)
      if (keep[j])
        inputs.push_back(op.getInputs()[j]);
    SmallVector<Type> types(liveResults.size(), resultType);
    auto newOp = MapOp::create(rewriter, op.getLoc(), types, inputs,
                               op.getRoleAttr());
    newOp->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    rewriter.inlineRegionBefore(op.getBody(), newOp.getBody(),
                                newOp.getBody().end());
    SmallVector<Value> yielded;
    for (unsigned r : liveResults)
      yielded.push_back(yield.getValues()[r]);
    rewriter.setInsertionPoint(yield);
    YieldOp::create(rewriter, yield.getLoc(), yielded);
    rewriter.eraseOp(yield);
    llvm::BitVector erase(block.getNumArguments());
    for (unsigned j = 0; j < keep.size(); ++j)
      if (!keep[j])
        erase.set(j);
    block.eraseArguments(erase);
    for (auto [i, r] : llvm::enumerate(liveResults))
      rewriter.replaceAllUsesWith(op.getResult(r), newOp.getResult(i));
    rewriter.eraseOp(op);
    return success();
  }
};
} // namespace

void MapOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                        MLIRContext *context) {
  results.add<ForwardIdentityResults, SimplifyMap>(context);
}

//===----------------------------------------------------------------------===//
// RecurrenceOp
//===----------------------------------------------------------------------===//

DecayClass RecurrenceOp::getTypeDecayClass() {
  if (!getDecay())
    return DecayClass::none;
  auto t = cast<FieldType>(getDecay().getType());
  if (!t.isToken())
    return DecayClass::fixed;
  if (FieldType::extentRank(t.getExtent()) < 2)
    return DecayClass::scalar;
  return DecayClass::diagonal;
}

LogicalResult RecurrenceOp::verify() {
  auto typeOf = [](Value v) { return cast<FieldType>(v.getType()); };
  FieldType vt = typeOf(getV());
  if (!vt.isToken())
    return emitOpError() << "v must vary per token, got " << str(vt);
  if (getState() == StateKind::matrix) {
    if (!getQ() || !getK())
      return emitOpError() << "matrix state needs q and k operands";
    if (typeOf(getQ()).getExtent() != Extent::key)
      return emitOpError() << "q must have extent key, got "
                           << str(typeOf(getQ()));
    if (typeOf(getK()).getExtent() != Extent::key)
      return emitOpError() << "k must have extent key, got "
                           << str(typeOf(getK()));
    if (vt.getExtent() != Extent::value)
      return emitOpError() << "v must have extent value for a matrix state, got "
                           << str(vt);
  } else {
    if (getQ() || getK())
      return emitOpError() << "vector state takes no q or k operands";
    if (vt.getExtent() != Extent::value && vt.getExtent() != Extent::hidden)
      return emitOpError()
             << "v must have extent value or hidden for a vector state, got "
             << str(vt);
    if (getUpdate() != UpdateRule::additive ||
        getReadout() != Readout::inclusive)
      return emitOpError() << "vector state needs update additive and readout "
                              "inclusive";
  }
  if (getUpdate() == UpdateRule::delta) {
    if (!getBeta())
      return emitOpError() << "delta update needs a beta operand";
    FieldType bt = typeOf(getBeta());
    if (FieldType::extentRank(bt.getExtent()) > 1 || !bt.isToken())
      return emitOpError() << "beta must be !linac.field<token, head> or "
                              "!linac.field<token, scalar>, got "
                           << str(bt);
  } else if (getBeta()) {
    return emitOpError() << "beta is only allowed with the delta update";
  }
  if (getReadout() == Readout::exclusive_bonus) {
    if (!getBonus())
      return emitOpError() << "exclusive_bonus readout needs a bonus operand";
    FieldType ut = typeOf(getBonus());
    if (ut.isToken() || ut.getExtent() != Extent::key)
      return emitOpError() << "bonus must be !linac.field<constant, key>, got "
                           << str(ut);
  } else if (getBonus()) {
    return emitOpError() << "bonus is only allowed with the exclusive_bonus "
                            "readout";
  }
  if (getDecay()) {
    FieldType gt = typeOf(getDecay());
    Extent channel =
        getState() == StateKind::matrix ? Extent::key : vt.getExtent();
    if (FieldType::extentRank(gt.getExtent()) == 2 &&
        gt.getExtent() != channel)
      return emitOpError() << "decay must have extent scalar, head or "
                           << stringifyExtent(channel) << ", got " << str(gt);
  }
  DecayClass declared = getDecayClass();
  DecayClass implied = getTypeDecayClass();
  // `none` with a decay operand is allowed: linac-infer-decay-class proved it 0.
  if (declared != DecayClass::unknown && declared != implied &&
      !(declared == DecayClass::none && getDecay()))
    return emitOpError() << "decay_class " << stringifyDecayClass(declared)
                         << " disagrees with the decay operand, which implies "
                         << stringifyDecayClass(implied);
  FieldType rt = cast<FieldType>(getType());
  if (!rt.isToken() || rt.getExtent() != vt.getExtent())
    return emitOpError() << "result must be !linac.field<token, "
                         << stringifyExtent(vt.getExtent()) << ">, got "
                         << str(rt);
  return success();
}

//===----------------------------------------------------------------------===//
// OutputOp
//===----------------------------------------------------------------------===//

LogicalResult OutputOp::verify() {
  auto in = cast<FieldType>(getInput().getType());
  if (!in.isToken())
    return emitOpError() << "input must vary per token, got " << str(in);
  for (auto [name, v] : {std::pair<StringRef, Value>{"gate", getGate()},
                         {"residual", getResidual()}}) {
    if (!v)
      continue;
    auto t = cast<FieldType>(v.getType());
    if (FieldType::broadcast(in, t) != in)
      return emitOpError() << name << " of type " << str(t)
                           << " does not broadcast to the input type "
                           << str(in);
  }
  return success();
}
