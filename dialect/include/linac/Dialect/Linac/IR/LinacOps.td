//===- LinacOps.td - linac operations ------------------------*- tablegen -*-===//

#ifndef LINAC_OPS_TD
#define LINAC_OPS_TD

include "linac/Dialect/Linac/IR/LinacTypes.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Linac_Field : Type<CPred<"::llvm::isa<::mlir::linac::FieldType>($_self)">,
                       "linac field", "::mlir::linac::FieldType">;

//===----------------------------------------------------------------------===//
// Containers
//===----------------------------------------------------------------------===//

def Linac_VariantOp : Linac_Op<"variant", [
    IsolatedFromAbove, Symbol, SingleBlock, NoTerminator, NoRegionArguments]> {
  let summary = "one linear-attention variant (a token mixer layer)";
  let description = [{
    Holds the description of one linear-attention layer: its projections
    (`linac.input`), parameters (`linac.param`), indices (`linac.index`),
    elementwise prologue expressions (`linac.map`), exactly one
    `linac.recurrence` and, last, one `linac.output`.

    `key_dim` and `value_dim` are the per-head sizes at the model width the
    IR was built for (`linac.model`'s hidden). `key_expand` / `value_expand`,
    when present, say the size is that ratio of the model width split over
    the heads (the runtime resolves it at its own width); absent, the size is
    absolute. The emitter writes them into the registry's layer description.

    Example:

    ```mlir
    linac.variant @gated_deltanet attributes {heads = 4 : i64, key_dim = 256 : i64, value_dim = 512 : i64, chunk = 64 : i64} {
      %q = linac.input "q" {conv = 4 : i64, activation = #linac.activation<silu>, l2norm} : !linac.field<token, key>
      ...
      linac.output %o : !linac.field<token, value> norm(rmsnorm)
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$heads,
                       I64Attr:$key_dim, I64Attr:$value_dim,
                       OptionalAttr<F64Attr>:$key_expand,
                       OptionalAttr<F64Attr>:$value_expand,
                       DefaultValuedAttr<I64Attr, "64">:$chunk,
                       OptionalAttr<StrAttr>:$description);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
  }];
}

def Linac_AttentionOp : Linac_Op<"attention", [Symbol]> {
  let summary = "a full softmax attention layer";
  let description = [{
    A causal softmax attention layer with optional grouped-query heads
    (`kv_heads` < `heads`) and rotary embeddings (`rope`, `rope_theta`).

    Example:

    ```mlir
    linac.attention @attention attributes {heads = 16 : i64, kv_heads = 16 : i64, head_dim = 64 : i64, rope, rope_theta = 1.000000e+04 : f64}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$heads,
                       I64Attr:$kv_heads, I64Attr:$head_dim,
                       OptionalAttr<F64Attr>:$rope_theta, UnitAttr:$rope);
  let assemblyFormat = "$sym_name attr-dict-with-keyword";
  let hasVerifier = 1;
}

def Linac_ModelOp : Linac_Op<"model", [Symbol]> {
  let summary = "a hybrid model: layer count, sizes and schedule";
  let description = [{
    Describes the hybrid stack. `schedule` is a schedule in the text form of
    specs/README.md: `pure` (all layers use `linear`), `transformer` (all use
    `attention`), `R:1` (blocks of R linear layers then 1 attention layer,
    repeated over `num_layers`; a trailing partial block is linear, and when
    R + 1 exceeds `num_layers` the last layer is attention) or `i,j,...`
    (0-based attention layer indices). It is parsed and checked by the spec
    front end, as `linac compile` and `linac train` do (the verifier expands
    it with the front end's code: the runtime's one expansion).

    Example:

    ```mlir
    linac.model @model attributes {hidden = 1024 : i64, vocab = 32000 : i64, num_layers = 8 : i64, schedule = "3:1", linear = @gated_deltanet, attention = @attention}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$hidden,
                       I64Attr:$vocab, I64Attr:$num_layers, StrAttr:$schedule,
                       OptionalAttr<FlatSymbolRefAttr>:$linear,
                       OptionalAttr<FlatSymbolRefAttr>:$attention);
  let assemblyFormat = "$sym_name attr-dict-with-keyword";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Variant contents
//===----------------------------------------------------------------------===//

def Linac_InputOp : Linac_Op<"input", [HasParent<"VariantOp">, Pure]> {
  let summary = "a per-token projection of the layer input";
  let description = [{
    A learned projection `W x` of the layer input, post-processed in the
    order: optional token shift, optional low-rank factorisation (`low_rank`
    > 0 is the rank), short causal depthwise conv (`conv` = kernel width, 0 =
    none), `activation`, optional L2 normalisation over the extent (`l2norm`)
    and rotary embedding (`rope`). `bias`: the projection has a bias. The
    extent of the result type is the output size of the projection per head.

    Example:

    ```mlir
    %q = linac.input "q" {conv = 4 : i64, activation = #linac.activation<silu>, l2norm} : !linac.field<token, key>
    ```
  }];
  let arguments = (ins StrAttr:$name,
                       DefaultValuedAttr<I64Attr, "0">:$conv,
                       DefaultValuedAttr<Linac_ActivationAttr, "Activation::none">:$activation,
                       UnitAttr:$l2norm,
                       DefaultValuedAttr<I64Attr, "0">:$low_rank,
                       DefaultValuedAttr<BoolAttr, "false">:$token_shift,
                       UnitAttr:$rope, UnitAttr:$bias);
  let results = (outs Linac_Field:$result);
  let assemblyFormat = "$name attr-dict `:` qualified(type($result))";
  let hasVerifier = 1;
}

def Linac_ParamOp : Linac_Op<"param", [HasParent<"VariantOp">, Pure]> {
  let summary = "a learned parameter, constant over tokens";
  let description = [{
    A learned parameter with its initialiser: `init` (`#linac.init`, default
    zeros) and its arguments `init_args` (a for constant and normal; a, b for
    uniform, log_uniform and dt_bias).

    Example:

    ```mlir
    %A = linac.param "A_log" {init = #linac.init<log_uniform>, init_args = array<f64: 1.0, 16.0>} : !linac.field<constant, head>
    ```
  }];
  let arguments = (ins StrAttr:$name,
                       DefaultValuedAttr<Linac_InitKindAttr, "InitKind::zeros">:$init,
                       DefaultValuedAttr<DenseF64ArrayAttr, "{}">:$init_args);
  let results = (outs Linac_Field:$result);
  let assemblyFormat = "$name attr-dict `:` qualified(type($result))";
  let hasVerifier = 1;
}

def Linac_IndexOp : Linac_Op<"index", [HasParent<"VariantOp">, Pure]> {
  let summary = "a structural index (head, layer, number of layers)";
  let description = [{
    The index of the current head (`"head"`, extent head), of the current
    layer (`"layer"`, extent scalar) or the number of layers
    (`"num_layers"`, extent scalar), as a constant field of `f32` values.

    Example:

    ```mlir
    %h = linac.index "head" : !linac.field<constant, head>
    %l = linac.index "layer" : !linac.field<constant, scalar>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs Linac_Field:$result);
  let assemblyFormat = "$name attr-dict `:` qualified(type($result))";
  let hasVerifier = 1;
}

def Linac_MapOp : Linac_Op<"map", [HasParent<"VariantOp">,
    IsolatedFromAbove, SingleBlock]> {
  let summary = "an elementwise expression over fields, with broadcast";
  let description = [{
    Applies a scalar expression elementwise over its operands, broadcasting
    them (see `!linac.field`). The body has one `f32` block argument per
    operand and yields one `f32` per result; it may contain only arith and
    math ops. Every result has the broadcast type of the operands. `role`
    says what the value is for (`"decay"`, `"beta"`, `"k"`, `"gate"`, ...;
    `"grad:<role>"` for derivatives made by `linac-differentiate`).

    Maps are deliberately not `Pure`: generic DCE keeps them (gradient maps
    have no users but are read by the emitters). The linac canonicalization
    patterns erase unused non-gradient maps.

    Example:

    ```mlir
    %g = linac.map (%a, %A) {role = "decay"} : (!linac.field<token, head>, !linac.field<constant, head>) -> !linac.field<token, head> {
    ^bb0(%x: f32, %y: f32):
      %e = math.exp %y : f32
      %m = arith.mulf %x, %e : f32
      %n = arith.negf %m : f32
      linac.yield %n : f32
    }
    ```
  }];
  let arguments = (ins Variadic<Linac_Field>:$inputs, OptionalAttr<StrAttr>:$role);
  let results = (outs Variadic<Linac_Field>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let hasCanonicalizer = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
    /// The values yielded by the body, one per result.
    ::mlir::OperandRange getYieldedValues();
    /// The broadcast type of `types` (constant scalar for none), or null.
    static FieldType broadcastTypes(::mlir::MLIRContext *ctx,
                                    ::mlir::TypeRange types);
    /// True for gradient maps made by linac-differentiate (role "grad:...").
    bool isGradient();
  }];
}

def Linac_YieldOp : Linac_Op<"yield", [Pure, Terminator, HasParent<"MapOp">]> {
  let summary = "yields the scalar results of a linac.map body";
  let description = [{
    Terminates a `linac.map` body; yields one `f32` per map result.

    Example:

    ```mlir
    linac.yield %z : f32
    ```
  }];
  let arguments = (ins Variadic<F32>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` qualified(type($values)))?";
}

def Linac_RecurrenceOp : Linac_Op<"recurrence", [HasParent<"VariantOp">, Pure,
    AttrSizedOperandSegments]> {
  let summary = "the linear-attention recurrence of a variant";
  let description = [{
    The state recurrence (DESIGN.md section 3). Per head and token:
    `matrix` state: S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T (`additive`) or
    the delta rule with `beta`; readout `inclusive` o_t = scale S_t^T q_t or
    `exclusive_bonus` with `bonus` u. `vector` state (HGRN): h_t = exp(g_t) *
    h_{t-1} + v_t elementwise (no q/k). `decay` is the log-decay g (absent
    means g = 0). `decay_class` is filled by `linac-infer-decay-class`;
    `algorithm` (and the discardable `tile` dictionary) by
    `linac-select-algorithm`; `fused` (how the chunk forward computes the
    roles itself) by `linac-plan-fused-prologue`. `scale` is the readout
    scale the spec gives; absent, it is key_dim^-0.5 at the width the layer
    is built at.

    Syntax: `linac.recurrence <state> <update> <readout>` then the operands
    `q(..) k(..) v(..) decay(..) beta(..) bonus(..)` (each with its type, all
    but `v` optional), then `decay_class(..) algorithm(..)`, an attribute
    dictionary (`scale`, `tile`) and the result type.

    Example:

    ```mlir
    %o = linac.recurrence matrix delta inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) beta(%b : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) {scale = 6.250000e-02 : f64} -> !linac.field<token, value>
    ```
  }];
  let arguments = (ins Optional<Linac_Field>:$q, Optional<Linac_Field>:$k,
                       Linac_Field:$v, Optional<Linac_Field>:$decay,
                       Optional<Linac_Field>:$beta, Optional<Linac_Field>:$bonus,
                       Linac_StateKindAttr:$state,
                       Linac_UpdateRuleAttr:$update,
                       Linac_ReadoutAttr:$readout,
                       DefaultValuedAttr<Linac_DecayClassAttr, "DecayClass::unknown">:$decay_class,
                       DefaultValuedAttr<Linac_AlgorithmAttr, "Algorithm::unselected">:$algorithm,
                       OptionalAttr<F64Attr>:$scale,
                       OptionalAttr<DictionaryAttr>:$tile,
                       OptionalAttr<DictionaryAttr>:$fused);
  let results = (outs Linac_Field:$result);
  let assemblyFormat = [{
    custom<LinacEnum>($state) custom<LinacEnum>($update) custom<LinacEnum>($readout)
    (`q` `(` $q^ `:` qualified(type($q)) `)`)?
    (`k` `(` $k^ `:` qualified(type($k)) `)`)?
    `v` `(` $v `:` qualified(type($v)) `)`
    (`decay` `(` $decay^ `:` qualified(type($decay)) `)`)?
    (`beta` `(` $beta^ `:` qualified(type($beta)) `)`)?
    (`bonus` `(` $bonus^ `:` qualified(type($bonus)) `)`)?
    `decay_class` `(` custom<LinacEnum>($decay_class) `)`
    `algorithm` `(` custom<LinacEnum>($algorithm) `)`
    attr-dict `->` qualified(type($result))
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The decay class implied by the decay operand's type alone.
    DecayClass getTypeDecayClass();
  }];
}

def Linac_OutputOp : Linac_Op<"output", [HasParent<"VariantOp">,
    AttrSizedOperandSegments]> {
  let summary = "the epilogue of a variant: norm, output gate, residual";
  let description = [{
    The last op of a variant: o = norm(input [+ residual]) [* gate], then the
    output projection W_o (implicit); the residual (Mamba-2's D * x) is added
    before the norm, as specs/README.md defines. `gate` is already activated
    (e.g. a `linac.map {role = "gate"}` computing silu).

    Example:

    ```mlir
    linac.output %o : !linac.field<token, value> norm(rmsnorm) gate(%g : !linac.field<token, value>)
    ```
  }];
  let arguments = (ins Linac_Field:$input,
                       DefaultValuedAttr<Linac_NormKindAttr, "NormKind::none">:$norm,
                       Optional<Linac_Field>:$gate, Optional<Linac_Field>:$residual);
  let assemblyFormat = [{
    $input `:` qualified(type($input)) `norm` `(` custom<LinacEnum>($norm) `)`
    (`gate` `(` $gate^ `:` qualified(type($gate)) `)`)?
    (`residual` `(` $residual^ `:` qualified(type($residual)) `)`)?
    attr-dict
  }];
  let hasVerifier = 1;
}

#endif // LINAC_OPS_TD
