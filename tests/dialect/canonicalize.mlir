// RUN: linac-opt %s -canonicalize -split-input-file | FileCheck %s

// An identity map folds to its operand; an unused map is erased.
// CHECK-LABEL: linac.variant @identity
// CHECK-NOT: linac.map
// CHECK: %[[V:.*]] = linac.input "v"
// CHECK: linac.output %[[V]] :
linac.variant @identity attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %v = linac.input "v" : !linac.field<token, value>
  %m = linac.map (%v) : (!linac.field<token, value>) -> !linac.field<token, value> {
  ^bb0(%x: f32):
    linac.yield %x : f32
  }
  %dead = linac.map (%v) : (!linac.field<token, value>) -> !linac.field<token, value> {
  ^bb0(%x: f32):
    %e = math.exp %x : f32
    linac.yield %e : f32
  }
  linac.output %m : !linac.field<token, value> norm(none)
}

// -----

// An unused operand is dropped when the broadcast type is unchanged; an
// unused result is dropped; a needed operand that only widens is kept.
// CHECK-LABEL: linac.variant @drop
// CHECK: %[[A:.*]] = linac.input "a"
// CHECK-NOT: linac.param "p"
// CHECK: %[[W:.*]] = linac.param "w"
// CHECK: %[[M:.*]] = linac.map(%[[A]], %[[W]]) {role = "decay"} : (!linac.field<token, head>, !linac.field<constant, key>) -> !linac.field<token, key> {
// CHECK-NEXT: ^bb0(%[[X:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[E:.*]] = math.exp %[[X]] : f32
// CHECK-NEXT: linac.yield %[[E]] : f32
// CHECK: decay(%[[M]] :
linac.variant @drop attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %p = linac.param "p" : !linac.field<constant, head>
  %w = linac.param "w" : !linac.field<constant, key>
  %m:2 = linac.map (%a, %p, %w) {role = "decay"} : (!linac.field<token, head>, !linac.field<constant, head>, !linac.field<constant, key>) -> (!linac.field<token, key>, !linac.field<token, key>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %e = math.exp %x : f32
    %s = arith.addf %x, %y : f32
    linac.yield %e, %s : f32, f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%m#0 : !linac.field<token, key>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}

// -----

// Arith inside a body is folded; gradient maps are kept although unused.
// CHECK-LABEL: linac.variant @fold
// CHECK: linac.map(%{{.*}}) {role = "decay"}
// CHECK-NEXT: ^bb0(%[[X:.*]]: f32):
// CHECK-NEXT: %[[N:.*]] = arith.negf %[[X]] : f32
// CHECK-NEXT: linac.yield %[[N]] : f32
// CHECK: linac.map(%{{.*}}) {role = "grad:decay"}
linac.variant @fold attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %g = linac.map (%a) {role = "decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %one = arith.constant 1.0 : f32
    %m = arith.mulf %x, %one : f32
    %n = arith.negf %m : f32
    linac.yield %n : f32
  }
  %dg = linac.map (%a) {role = "grad:decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %c = arith.constant -1.0 : f32
    linac.yield %c : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}
