//===- LinacBase.td - linac dialect definition --------------*- tablegen -*-===//
//
// The linac dialect describes one linear-attention variant (a `linac.variant`:
// projections, parameters, elementwise prologue expressions, the recurrence and
// the output epilogue), full-attention layers and the hybrid model schedule.
// Scalar expressions inside `linac.map` bodies are written in arith/math.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_BASE_TD
#define LINAC_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Linac_Dialect : Dialect {
  let name = "linac";
  let cppNamespace = "::mlir::linac";
  let summary = "Declarative description of hybrid linear-attention layers.";
  let description = [{
    The `linac` dialect is the middle of the linac compiler: a YAML spec of a
    linear-attention variant is lowered to a `linac.variant` op; passes infer
    the decay class, simplify and differentiate the prologue expressions and
    pick a kernel algorithm; emitters then instantiate CUDA/C++ skeletons.

    Values are per-head fields of type `!linac.field<varying, extent>`.
    Scalar expressions over fields are `linac.map` ops whose bodies are
    arith/math ops on `f32`.

    Example:

    ```mlir
    linac.variant @gdn attributes {heads = 4 : i64, key_dim = 256 : i64, value_dim = 512 : i64} {
      %q = linac.input "q" : !linac.field<token, key>
      ...
    }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    /// Registers the types and attributes (defined in LinacTypes.cpp).
    void registerTypesAndAttributes();
  }];
}

class Linac_Op<string mnemonic, list<Trait> traits = []>
    : Op<Linac_Dialect, mnemonic, traits>;

#endif // LINAC_BASE_TD
