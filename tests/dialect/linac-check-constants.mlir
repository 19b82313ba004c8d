// RUN: linac-opt %s -split-input-file -linac-check-constants -verify-diagnostics

// A folded constant that is inf: an error at its map.
linac.variant @inf attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  // expected-error@+1 {{'decay' folds to the constant inf, which is not a finite float32 number}}
  %g = linac.map (%a) {role = "decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %c = arith.constant 0x7F800000 : f32
    %m = arith.mulf %x, %c : f32
    linac.yield %m : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%q : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}

// -----

// In a derivative (a map made by linac-differentiate): said so. Finite constants pass.
linac.variant @nan attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %g = linac.map (%a) {role = "decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %c = arith.constant -3.4e+38 : f32
    %m = arith.mulf %x, %c : f32
    linac.yield %m : f32
  }
  // expected-error@+1 {{the derivative of 'decay' folds to the constant nan, which is not a finite float32 number}}
  %d = linac.map (%a) {role = "grad:decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %c = arith.constant 0x7FC00000 : f32
    linac.yield %c : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%q : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}
