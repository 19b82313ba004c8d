//===- LinacEnums.td - linac enums and enum attributes -------*- tablegen -*-===//
//
// Every enum is an I32EnumAttr (C++ enum class + symbolize/stringify) and, where
// it is stored on an op, a dialect EnumAttr printed as `#linac.<mnemonic><value>`,
// e.g. `#linac.activation<silu>`, `#linac.decay_class<scalar>`.
// Inside op assembly formats the enum values are written as bare keywords.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_ENUMS_TD
#define LINAC_ENUMS_TD

include "mlir/IR/EnumAttr.td"
include "linac/Dialect/Linac/IR/LinacBase.td"

class Linac_I32Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::linac";
}

def Linac_DecayClass : Linac_I32Enum<"DecayClass", "decay class of a recurrence", [
  I32EnumAttrCase<"unknown", 0>, I32EnumAttrCase<"none", 1>,
  I32EnumAttrCase<"fixed", 2>, I32EnumAttrCase<"scalar", 3>,
  I32EnumAttrCase<"diagonal", 4>]>;
def Linac_UpdateRule : Linac_I32Enum<"UpdateRule", "state update rule", [
  I32EnumAttrCase<"additive", 0>, I32EnumAttrCase<"delta", 1>]>;
def Linac_Readout : Linac_I32Enum<"Readout", "output readout of the state", [
  I32EnumAttrCase<"inclusive", 0>, I32EnumAttrCase<"exclusive_bonus", 1>]>;
def Linac_StateKind : Linac_I32Enum<"StateKind", "shape of the recurrent state", [
  I32EnumAttrCase<"matrix", 0>, I32EnumAttrCase<"vector", 1>]>;
def Linac_Algorithm : Linac_I32Enum<"Algorithm", "kernel algorithm", [
  I32EnumAttrCase<"unselected", 0>, I32EnumAttrCase<"chunk_additive", 1>,
  I32EnumAttrCase<"chunk_delta", 2>, I32EnumAttrCase<"vector_scan", 3>]>;
def Linac_Extent : Linac_I32Enum<"Extent", "per-head extent of a field", [
  I32EnumAttrCase<"scalar", 0>, I32EnumAttrCase<"head", 1>,
  I32EnumAttrCase<"key", 2>, I32EnumAttrCase<"value", 3>,
  I32EnumAttrCase<"hidden", 4>]>;
def Linac_Varying : Linac_I32Enum<"Varying", "whether a field varies over tokens", [
  I32EnumAttrCase<"constant", 0>, I32EnumAttrCase<"token", 1>]>;
def Linac_Activation : Linac_I32Enum<"Activation", "pointwise activation", [
  I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"silu", 1>,
  I32EnumAttrCase<"sigmoid", 2>, I32EnumAttrCase<"relu", 3>,
  I32EnumAttrCase<"tanh", 4>, I32EnumAttrCase<"elu1", 5>]>;
def Linac_NormKind : Linac_I32Enum<"NormKind", "output normalisation", [
  I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"rmsnorm", 1>,
  I32EnumAttrCase<"groupnorm", 2>, I32EnumAttrCase<"layernorm", 3>]>;

def Linac_InitKind : Linac_I32Enum<"InitKind", "parameter initialiser", [
  I32EnumAttrCase<"zeros", 0>, I32EnumAttrCase<"ones", 1>,
  I32EnumAttrCase<"constant", 2>, I32EnumAttrCase<"normal", 3>,
  I32EnumAttrCase<"uniform", 4>, I32EnumAttrCase<"log_uniform", 5>,
  I32EnumAttrCase<"dt_bias", 6>]>;

class Linac_EnumAttr<EnumAttrInfo info, string mnemonic, string desc>
    : EnumAttr<Linac_Dialect, info, mnemonic> {
  let assemblyFormat = "`<` $value `>`";
  let description = desc;
}

def Linac_DecayClassAttr : Linac_EnumAttr<Linac_DecayClass, "decay_class", [{
  How the log-decay `g` of a recurrence varies: `none` (g = 0), `fixed`
  (per head constant), `scalar` (per head, per token), `diagonal` (per head,
  per token, per key channel); `unknown` until `linac-infer-decay-class` runs.
  Example: `#linac.decay_class<scalar>`.
}]>;
def Linac_UpdateRuleAttr : Linac_EnumAttr<Linac_UpdateRule, "update", [{
  The state update: `additive` (S = diag(l) S + k v^T) or `delta`
  (S = (I - b k k^T) diag(l) S + b k v^T). Example: `#linac.update<delta>`.
}]>;
def Linac_ReadoutAttr : Linac_EnumAttr<Linac_Readout, "readout", [{
  The readout: `inclusive` (o = scale S_t^T q) or `exclusive_bonus` (RWKV-6:
  o = S_{t-1}^T q + ((q * u * k) . 1) v). Example: `#linac.readout<inclusive>`.
}]>;
def Linac_StateKindAttr : Linac_EnumAttr<Linac_StateKind, "state", [{
  The state shape: `matrix` (dk x dv per head) or `vector` (HGRN, elementwise).
  Example: `#linac.state<matrix>`.
}]>;
def Linac_AlgorithmAttr : Linac_EnumAttr<Linac_Algorithm, "algorithm", [{
  The kernel algorithm chosen by `linac-select-algorithm`.
  Example: `#linac.algorithm<chunk_delta>`.
}]>;
def Linac_ActivationAttr : Linac_EnumAttr<Linac_Activation, "activation", [{
  A pointwise activation applied to a projection (after the short conv).
  `elu1` is elu(x) + 1. Example: `#linac.activation<silu>`.
}]>;
def Linac_NormKindAttr : Linac_EnumAttr<Linac_NormKind, "norm", [{
  The output normalisation. Example: `#linac.norm<rmsnorm>`.
}]>;

def Linac_InitKindAttr : Linac_EnumAttr<Linac_InitKind, "init", [{
  How a `linac.param` starts (specs/README.md, params.init): `zeros`, `ones`,
  `constant` (a), `normal` (std a), `uniform` / `log_uniform` ([a, b]),
  `dt_bias` (Mamba's inverse softplus of a log-uniform dt in [a, b]); a and b
  are the param's `init_args`. Example: `#linac.init<log_uniform>`.
}]>;

#endif // LINAC_ENUMS_TD
