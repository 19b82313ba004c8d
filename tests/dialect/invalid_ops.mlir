// RUN: linac-opt %s -split-input-file -verify-diagnostics
// One expected error per verifier rule.

linac.variant @v attributes {heads = 0 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
// expected-error@-1 {{'heads' must be positive, got 0}}
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  // expected-error@+1 {{input "q" must vary per token, got !linac.field<constant, key>}}
  %q = linac.input "q" : !linac.field<constant, key>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  // expected-error@+1 {{param "A" must be constant over tokens, got !linac.field<token, head>}}
  %a = linac.param "A" : !linac.field<token, head>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  // expected-error@+1 {{unknown index "channel", expected "head", "layer" or "num_layers"}}
  %h = linac.index "channel" : !linac.field<constant, head>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  // expected-error@+1 {{index "layer" has type !linac.field<constant, head>, expected !linac.field<constant, scalar>}}
  %h = linac.index "layer" : !linac.field<constant, head>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{operands do not broadcast: extents key value}}
  %m = linac.map (%k, %v) : (!linac.field<token, key>, !linac.field<token, value>) -> !linac.field<token, key> {
  ^bb0(%x: f32, %y: f32):
    linac.yield %x : f32
  }
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %a = linac.input "a" : !linac.field<token, head>
  %p = linac.param "p" : !linac.field<constant, key>
  // expected-error@+1 {{result 0 has type !linac.field<token, head>, expected the broadcast type !linac.field<token, key>}}
  %m = linac.map (%a, %p) : (!linac.field<token, head>, !linac.field<constant, key>) -> !linac.field<token, head> {
  ^bb0(%x: f32, %y: f32):
    linac.yield %x : f32
  }
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %a = linac.input "a" : !linac.field<token, head>
  // expected-error@+1 {{body has 2 arguments, expected one per operand (1)}}
  %m = linac.map (%a) : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32, %y: f32):
    linac.yield %x : f32
  }
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %a = linac.input "a" : !linac.field<token, head>
  // expected-error@+1 {{body argument 0 has type 'f64', expected f32}}
  %m = linac.map (%a) : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f64):
    %c = arith.constant 1.0 : f32
    linac.yield %c : f32
  }
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %a = linac.input "a" : !linac.field<token, head>
  // expected-error@+1 {{body yields 2 values, expected one per result (1)}}
  %m = linac.map (%a) : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    linac.yield %x, %x : f32, f32
  }
}

// -----

func.func private @f(f32) -> f32
linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %a = linac.input "a" : !linac.field<token, head>
  %m = linac.map (%a) : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    // expected-error@+1 {{is not allowed in a 'linac.map' body (only arith and math ops and 'linac.yield')}}
    %y = func.call @f(%x) : (f32) -> f32
    linac.yield %y : f32
  }
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{matrix state needs q and k operands}}
  %o = linac.recurrence matrix additive inclusive v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, value>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{q must have extent key, got !linac.field<token, value>}}
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, value>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, key>
  // expected-error@+1 {{v must have extent value for a matrix state, got !linac.field<token, key>}}
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, key>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, hidden>
  // expected-error@+1 {{vector state takes no q or k operands}}
  %o = linac.recurrence vector additive inclusive q(%q : !linac.field<token, key>) v(%v : !linac.field<token, hidden>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, hidden>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{delta update needs a beta operand}}
  %o = linac.recurrence matrix delta inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{beta must be !linac.field<token, head> or !linac.field<token, scalar>, got !linac.field<token, key>}}
  %o = linac.recurrence matrix delta inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) beta(%k : !linac.field<token, key>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %b = linac.input "b" : !linac.field<token, head>
  // expected-error@+1 {{beta is only allowed with the delta update}}
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) beta(%b : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{exclusive_bonus readout needs a bonus operand}}
  %o = linac.recurrence matrix additive exclusive_bonus q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{bonus must be !linac.field<constant, key>, got !linac.field<token, key>}}
  %o = linac.recurrence matrix additive exclusive_bonus q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) bonus(%k : !linac.field<token, key>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{decay must have extent scalar, head or key, got !linac.field<token, value>}}
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{decay_class fixed disagrees with the decay operand, which implies diagonal}}
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%k : !linac.field<token, key>) decay_class(fixed) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{decay_class scalar disagrees with the decay operand, which implies none}}
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(scalar) algorithm(unselected) -> !linac.field<token, value>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error@+1 {{result must be !linac.field<token, value>, got !linac.field<token, key>}}
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, key>
}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %v = linac.input "v" : !linac.field<token, value>
  %g = linac.input "g" : !linac.field<token, key>
  // expected-error@+1 {{gate of type !linac.field<token, key> does not broadcast to the input type !linac.field<token, value>}}
  linac.output %v : !linac.field<token, value> norm(rmsnorm) gate(%g : !linac.field<token, key>)
}

// -----

// expected-error@+1 {{heads (6) must be a multiple of kv_heads (4)}}
linac.attention @a attributes {heads = 6 : i64, kv_heads = 4 : i64, head_dim = 64 : i64}

// -----

// Schedules are parsed and checked by the spec front end: its messages, word for word.
// expected-error@+1 {{unknown schedule '3:2'; expected 'R:1' (e.g. '3:1'), 'pure', 'transformer' or a comma-separated list of attention layer indices (e.g. '3,7,11')}}
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 4 : i64, schedule = "3:2", linear = @l, attention = @a}

// -----

// expected-error@+1 {{attention layer index 9 is out of range for a 4-layer model (valid: 0..3)}}
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 4 : i64, schedule = "1,9", linear = @l, attention = @a}

// -----

// expected-error@+1 {{layer count must be between 1 and 1024, got 1099511627776}}
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 1099511627776 : i64, schedule = "pure", linear = @l}

// -----

// expected-error@+1 {{schedule '3:1' has attention layers but no 'attention' symbol}}
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 4 : i64, schedule = "3:1", linear = @l}

// -----

linac.variant @v attributes {heads = 1 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  // expected-error@+1 {{unknown state 'tensor'}}
  %o = linac.recurrence tensor additive inclusive v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
}
