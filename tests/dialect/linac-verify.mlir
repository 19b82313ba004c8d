// RUN: linac-opt %s -split-input-file -linac-verify -verify-diagnostics | FileCheck %s

// A well-formed module passes unchanged.
// CHECK-LABEL: linac.variant @ok
// CHECK: linac.model @model
linac.variant @ok attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  %n = linac.map (%o) : (!linac.field<token, value>) -> !linac.field<token, value> {
  ^bb0(%x: f32):
    %t = math.tanh %x : f32
    linac.yield %t : f32
  }
  linac.output %n : !linac.field<token, value> norm(rmsnorm)
}
linac.attention @attention attributes {heads = 2 : i64, kv_heads = 2 : i64, head_dim = 8 : i64}
linac.model @model attributes {hidden = 16 : i64, vocab = 256 : i64, num_layers = 4 : i64, schedule = "3:1", linear = @ok, attention = @attention}

// -----

linac.variant @warn attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-warning@+1 {{input "z" of variant @warn is unused}}
  %z = linac.input "z" : !linac.field<token, key>
  // expected-warning@+1 {{param "p" of variant @warn is unused}}
  %p = linac.param "p" : !linac.field<constant, head>
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// -----

// expected-error@+1 {{variant @norec has 0 'linac.recurrence' ops, expected 1}}
linac.variant @norec attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %v = linac.input "v" : !linac.field<token, value>
  linac.output %v : !linac.field<token, value> norm(rmsnorm)
}

// -----

// expected-error@+1 {{variant @noout has 0 'linac.output' ops, expected 1}}
linac.variant @noout attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @bypass attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  // expected-error@+1 {{the output of variant @bypass does not consume the recurrence result}}
  linac.output %v : !linac.field<token, value> norm(rmsnorm)
}

// -----

linac.variant @late attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  // expected-error@+1 {{'linac.output' must be the last op of variant @late}}
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
  // expected-warning@+1 {{input "x" of variant @late is unused}}
  %x = linac.input "x" : !linac.field<token, key>
}

// -----

linac.attention @attention attributes {heads = 2 : i64, kv_heads = 2 : i64, head_dim = 8 : i64}
// expected-error@+1 {{linear symbol @attention of model @m is a 'linac.attention', expected 'linac.variant'}}
linac.model @m attributes {hidden = 16 : i64, vocab = 256 : i64, num_layers = 2 : i64, schedule = "1:1", linear = @attention, attention = @attention}

// -----

// expected-error@+1 {{attention symbol @missing of model @m does not resolve}}
linac.model @m attributes {hidden = 16 : i64, vocab = 256 : i64, num_layers = 1 : i64, schedule = "transformer", attention = @missing}
