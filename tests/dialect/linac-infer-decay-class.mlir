// RUN: linac-opt %s -linac-infer-decay-class | FileCheck %s

// CHECK-LABEL: linac.variant @classes
linac.variant @classes attributes {heads = 2 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %w = linac.input "w" : !linac.field<token, key>
  %h = linac.index "head" : !linac.field<constant, head>
  %s = linac.input "s" : !linac.field<token, scalar>
  // RetNet: log(1 - 2^(-5-h)) depends on the head index only.
  %fixed = linac.map (%h) {role = "decay"} : (!linac.field<constant, head>) -> !linac.field<constant, head> {
  ^bb0(%x: f32):
    %one = arith.constant 1.0 : f32
    %five = arith.constant -5.0 : f32
    %two = arith.constant 2.0 : f32
    %e = arith.subf %five, %x : f32
    %p = math.powf %two, %e : f32
    %d = arith.subf %one, %p : f32
    %l = math.log %d : f32
    linac.yield %l : f32
  }
  %zero = linac.map (%a) {role = "decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %c = arith.constant 0.0 : f32
    linac.yield %c : f32
  }
  // CHECK: decay_class(none)
  %o0 = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  // CHECK: decay_class(fixed)
  %o1 = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%fixed : !linac.field<constant, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  // CHECK: decay_class(scalar)
  %o2 = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%a : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  // CHECK: decay_class(scalar)
  %o3 = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%s : !linac.field<token, scalar>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  // CHECK: decay_class(diagonal)
  %o4 = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%w : !linac.field<token, key>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  // CHECK: decay(%{{.*}} : !linac.field<token, head>) decay_class(none)
  %o5 = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%zero : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o0 : !linac.field<token, value> norm(none)
}

// HGRN: vector state, per-channel decay over hidden is diagonal.
// CHECK-LABEL: linac.variant @hgrn
// CHECK: decay_class(diagonal)
linac.variant @hgrn attributes {heads = 1 : i64, key_dim = 1 : i64, value_dim = 64 : i64} {
  %i = linac.input "i" : !linac.field<token, hidden>
  %f = linac.input "f" : !linac.field<token, hidden>
  %o = linac.recurrence vector additive inclusive v(%i : !linac.field<token, hidden>) decay(%f : !linac.field<token, hidden>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, hidden>
  linac.output %o : !linac.field<token, hidden> norm(rmsnorm)
}
