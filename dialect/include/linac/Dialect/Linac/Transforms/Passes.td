//===- Passes.td - linac passes ------------------------------*- tablegen -*-===//

#ifndef LINAC_TRANSFORMS_PASSES_TD
#define LINAC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def LinacVerifyPass : Pass<"linac-verify", "::mlir::ModuleOp"> {
  let summary = "check linac IR at a stage boundary";
  let description = [{
    Checks what op verifiers cannot: every `linac.variant` holds exactly one
    `linac.recurrence` and one `linac.output` (its last op), the output
    consumes the recurrence result (directly or through `linac.map`s), and
    every `linac.model` symbol resolves to a variant / attention op. Unused
    inputs and params are reported as warnings.

    Example: `linac-opt -linac-verify in.mlir`
  }];
}

def LinacInferDecayClassPass : Pass<"linac-infer-decay-class", "::mlir::ModuleOp"> {
  let summary = "infer the decay class of every recurrence";
  let description = [{
    Sets `decay_class` from the decay operand: absent -> none; constant ->
    fixed; token with extent scalar/head -> scalar; token with a channel
    extent -> diagonal. A decay produced by a `linac.map` whose body yields
    the constant 0 -> none.

    Example: `linac-opt -linac-infer-decay-class in.mlir`
  }];
  let dependentDialects = ["::mlir::linac::LinacDialect"];
}

def LinacDifferentiatePass : Pass<"linac-differentiate", "::mlir::ModuleOp"> {
  let summary = "derive gradients of prologue maps (reverse mode)";
  let description = [{
    For every `linac.map` result that feeds a recurrence operand (`q`, `k`,
    `v`, `decay`, `beta`) or the output's `gate` or `residual` directly, creates right after the map a
    `linac.map {role = "grad:<operand>"}` over the same operands whose i-th
    result is d(result)/d(operand i), built by reverse-mode differentiation
    of the scalar body. If the map has several results, the differentiated
    result's index is in the `result` attribute of the gradient map. A map
    without operands (a constant, such as a fixed decay) has no gradient map.

    Supported: arith.addf subf mulf divf negf maximumf minimumf maxnumf
    minnumf select constant cmpf (no gradient), math.exp expm1 log log1p tanh
    sqrt rsqrt absf powf.

    Example: `linac-opt -linac-differentiate in.mlir`
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
}

def LinacCheckConstantsPass : Pass<"linac-check-constants", "::mlir::ModuleOp"> {
  let summary = "reject inf and nan constants in map bodies";
  let description = [{
    Fails, at the `linac.map`'s location, when a float `arith.constant` in a
    map body is inf or nan: folding (canonicalize, or the chain rule of
    `linac-differentiate`) produced it from finite operands, and generated
    code cannot hold it. Runs after the last fold of the pipeline.

    Example: `linac-opt -linac-check-constants in.mlir`
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def LinacSelectAlgorithmPass : Pass<"linac-select-algorithm", "::mlir::ModuleOp"> {
  let summary = "pick the kernel algorithm and tile of every recurrence";
  let description = [{
    Sets `algorithm`: vector state -> vector_scan; additive -> chunk_additive;
    delta -> chunk_delta. Also sets `tile`, a dictionary of i64 entries the
    emitter turns into code: `chunk`, the variant's chunk hint (default 64),
    the chunk length the CPU kernels run (the generated `kChunk`); and
    `precise_decay_grad = 1` where the decay is a product with an exp factor
    of an operand (RWKV-6's -exp(w)): the gradient of that operand weighs
    each channel's d_g by the decay itself; and where a diagonal decay is read
    out exclusively, whose d_g ends in a difference that cancels at strong
    gates. Both make the kernels compute d_g for accuracy at strong decays
    (the Hopper diagonal backward takes its Ks / Qs products in two 16-bit
    halves; the generated kKind's preciseDecayGrad).
    The CUDA kernels choose their chunk and value block from the head dims and
    shared memory at run time.

    Example: `linac-opt -linac-select-algorithm in.mlir`
  }];
}

def LinacPlanFusedProloguePass : Pass<"linac-plan-fused-prologue", "::mlir::ModuleOp"> {
  let summary = "plan which recurrence roles the fused chunk forward computes itself";
  let description = [{
    Records on every `linac.recurrence` a `fused` dictionary saying how the
    chunk forward kernel can compute the variant's prologue
    (runtime/kernels/cuda/chunk_roles.cuh) instead of reading materialised
    roles:

    - `q`, `k`, `v`: the name of the `linac.input` read as the role's tile
      (the operand is that input, of extent key for q / k and value for v), or
      "" when the role is computed by its `linac.map`;
    - `norm_q`, `norm_k`: the tile is L2-normalised in the kernel (the input
      has `l2norm`, no `rope`, and the recurrence is its only user, so it can
      arrive unnormalised);
    - `decay`, `beta`: the role is computed in the kernel by its map (decay:
      a decay class other than none; beta: the delta rule);
    - `available`: true, or false with `reason` when the roles do not fit the
      fused forward: a vector state, a v that is not a value input, a role
      that is neither a tile nor a map, a map with more than 4 operands.

    Runs after `linac-infer-decay-class` and the last fold, so the maps and
    uses it sees are those the emitter prints. The emitter writes the plan
    into the registry (`runtime::FusedPlan`) and the kernel's Roles policy.

    Example: `linac-opt -linac-plan-fused-prologue in.mlir`

    ```mlir
    %o = linac.recurrence matrix additive inclusive q(%q : ...) k(%k : ...) v(%v : ...) decay(%g : ...) decay_class(diagonal) algorithm(unselected) {fused = {available = true, beta = false, decay = true, k = "k", norm_k = false, norm_q = false, q = "q", v = "v"}} -> !linac.field<token, value>
    ```
  }];
}

#endif // LINAC_TRANSFORMS_PASSES_TD
