// RUN: linac-opt %s -linac-select-algorithm | FileCheck %s

// The tile holds what the emitter turns into code: the chunk (the generated kChunk).

// CHECK-LABEL: linac.variant @delta
// CHECK: algorithm(chunk_delta) {tile = {chunk = 32 : i64}}
linac.variant @delta attributes {heads = 2 : i64, key_dim = 128 : i64, value_dim = 128 : i64, chunk = 32 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %b = linac.input "b" : !linac.field<token, head>
  %o = linac.recurrence matrix delta inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) beta(%b : !linac.field<token, head>) decay_class(none) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// CHECK-LABEL: linac.variant @additive
// CHECK: algorithm(chunk_additive) {tile = {chunk = 64 : i64}}
linac.variant @additive attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 32 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(none) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// CHECK-LABEL: linac.variant @hgrn
// CHECK: algorithm(vector_scan) {tile = {chunk = 64 : i64}}
linac.variant @hgrn attributes {heads = 1 : i64, key_dim = 1 : i64, value_dim = 64 : i64} {
  %i = linac.input "i" : !linac.field<token, hidden>
  %o = linac.recurrence vector additive inclusive v(%i : !linac.field<token, hidden>) decay_class(none) algorithm(unselected) -> !linac.field<token, hidden>
  linac.output %o : !linac.field<token, hidden> norm(rmsnorm)
}

// A decay with an exp factor of an operand (RWKV-6's -exp(w) times a scale): the gradient of w
// weighs d_g by the decay, so the tile asks for a precise d_g.
// CHECK-LABEL: linac.variant @exp_decay
// CHECK: algorithm(chunk_additive) {tile = {chunk = 64 : i64, precise_decay_grad = 1 : i64}}
linac.variant @exp_decay attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %w = linac.input "w" : !linac.field<token, key>
  %g = linac.map (%w) {role = "decay"} : (!linac.field<token, key>) -> !linac.field<token, key> {
  ^bb0(%x: f32):
    %e = math.exp %x : f32
    %n = arith.negf %e : f32
    %c = arith.constant 5.000000e-01 : f32
    %m = arith.mulf %c, %n : f32
    linac.yield %m : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, key>) decay_class(diagonal) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// GLA's logsigmoid(x) / 16 has no exp factor (its derivative is bounded): no entry.
// CHECK-LABEL: linac.variant @bounded_decay
// CHECK: algorithm(chunk_additive) {tile = {chunk = 64 : i64}}
linac.variant @bounded_decay attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %w = linac.input "w" : !linac.field<token, key>
  %g = linac.map (%w) {role = "decay"} : (!linac.field<token, key>) -> !linac.field<token, key> {
  ^bb0(%x: f32):
    %n = arith.negf %x : f32
    %e = math.exp %n : f32
    %one = arith.constant 1.000000e+00 : f32
    %s = arith.addf %one, %e : f32
    %l = math.log %s : f32
    %ls = arith.negf %l : f32
    %c = arith.constant 6.250000e-02 : f32
    %m = arith.mulf %ls, %c : f32
    linac.yield %m : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, key>) decay_class(diagonal) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// A diagonal decay read out exclusively: d_g ends in a difference that cancels at strong gates,
// so the tile asks for a precise d_g even where the decay has no exp factor.
// CHECK-LABEL: linac.variant @exclusive_diagonal
// CHECK: algorithm(chunk_additive) {tile = {chunk = 64 : i64, precise_decay_grad = 1 : i64}}
linac.variant @exclusive_diagonal attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %g = linac.input "g" : !linac.field<token, key>
  %u = linac.param "u" {init = #linac.init<zeros>} : !linac.field<constant, key>
  %o = linac.recurrence matrix additive exclusive_bonus q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, key>) bonus(%u : !linac.field<constant, key>) decay_class(diagonal) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// A scalar decay read out exclusively keeps the default (the halves are the diagonal stage's).
// CHECK-LABEL: linac.variant @exclusive_scalar
// CHECK: algorithm(chunk_additive) {tile = {chunk = 64 : i64}}
linac.variant @exclusive_scalar attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %g = linac.input "g" : !linac.field<token, head>
  %u = linac.param "u" {init = #linac.init<zeros>} : !linac.field<constant, key>
  %o = linac.recurrence matrix additive exclusive_bonus q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) bonus(%u : !linac.field<constant, key>) decay_class(scalar) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}
