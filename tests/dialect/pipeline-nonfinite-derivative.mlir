// RUN: linac-opt %s -linac-pipeline -verify-diagnostics
// linac-check-constants in the pipeline, after the last fold: the forward body is finite,
// but the chain rule multiplies its constants: d/dx -(x * 1e30 * 1e30) = -1e60,
// -inf in float32 once canonicalize folds it.
linac.variant @derivative attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  // expected-error@+1 {{the derivative of 'decay' folds to the constant -inf, which is not a finite float32 number}}
  %g = linac.map (%a) {role = "decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %c = arith.constant 1.0e+30 : f32
    %m = arith.mulf %x, %c : f32
    %n = arith.mulf %m, %c : f32
    %r = arith.negf %n : f32
    linac.yield %r : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%q : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}
