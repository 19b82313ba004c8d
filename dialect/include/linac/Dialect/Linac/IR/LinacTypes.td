//===- LinacTypes.td - linac types ---------------------------*- tablegen -*-===//

#ifndef LINAC_TYPES_TD
#define LINAC_TYPES_TD

include "mlir/IR/AttrTypeBase.td"
include "linac/Dialect/Linac/IR/LinacEnums.td"

def Linac_FieldType : TypeDef<Linac_Dialect, "Field"> {
  let mnemonic = "field";
  let summary = "a per-head quantity of a linear-attention layer";
  let description = [{
    A field is a per-head tensor-valued quantity. `varying` says whether it is
    fixed over tokens (`constant`: a parameter or an index) or varies per token
    (`token`). `extent` is its per-head shape: `scalar` (one value, shared by
    all heads), `head` (one value per head), `key` (dk channels), `value` (dv
    channels) or `hidden` (model hidden size, used by vector states).

    Elementwise ops broadcast: scalar < head < key | value | hidden; two
    different extents among key/value/hidden do not broadcast. The varying of a
    broadcast is `token` if any operand is `token`.

    Example:

    ```mlir
    !linac.field<token, key>
    !linac.field<constant, head>
    ```
  }];
  let parameters = (ins EnumParameter<Linac_Varying>:$varying,
                        EnumParameter<Linac_Extent>:$extent);
  let assemblyFormat = "`<` $varying `,` $extent `>`";
  let extraClassDeclaration = [{
    bool isToken() const { return getVarying() == Varying::token; }
    /// Rank of the extent in the broadcast order: scalar 0, head 1, else 2.
    static int extentRank(Extent e);
    /// The broadcast of two fields, or a null type if they do not broadcast.
    static FieldType broadcast(FieldType a, FieldType b);
  }];
}

#endif // LINAC_TYPES_TD
