// RUN: linac-opt %s -linac-differentiate -split-input-file -verify-diagnostics | FileCheck %s
// RUN: linac-opt %s -linac-differentiate -linac-differentiate -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=ONCE

// d/dx exp(x) = exp(x); d(x*y) = (y, x).
// CHECK-LABEL: linac.variant @basic
// CHECK: %[[G:.*]] = linac.map(%[[A:.*]]) {role = "decay"}
// CHECK: linac.map(%[[A]]) {role = "grad:decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
// CHECK-NEXT: ^bb0(%[[X:.*]]: f32):
// CHECK-NEXT: %[[E:.*]] = math.exp %[[X]] : f32
// CHECK-NEXT: linac.yield %[[E]] : f32
// CHECK: %[[B:.*]] = linac.map(%[[P:.*]], %[[Q:.*]]) {role = "beta"}
// CHECK: linac.map(%[[P]], %[[Q]]) {role = "grad:beta"} : (!linac.field<token, head>, !linac.field<constant, head>) -> (!linac.field<token, head>, !linac.field<token, head>) {
// CHECK-NEXT: ^bb0(%[[X:.*]]: f32, %[[Y:.*]]: f32):
// CHECK-NEXT: linac.yield %[[Y]], %[[X]] : f32, f32
// ONCE-LABEL: linac.variant @basic
// ONCE-COUNT-1: role = "grad:decay"
// ONCE-NOT: role = "grad:decay"
linac.variant @basic attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %bx = linac.input "b" : !linac.field<token, head>
  %s = linac.param "s" : !linac.field<constant, head>
  %g = linac.map (%a) {role = "decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %e = math.exp %x : f32
    linac.yield %e : f32
  }
  %b = linac.map (%bx, %s) {role = "beta"} : (!linac.field<token, head>, !linac.field<constant, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32, %y: f32):
    %m = arith.mulf %x, %y : f32
    linac.yield %m : f32
  }
  %o = linac.recurrence matrix delta inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) beta(%b : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}

// -----

// Gated DeltaNet decay: g = -exp(A) * softplus(a + dt), softplus(x) = log1p(exp(x)).
// dg/da = -exp(A) * exp(s) / (1 + exp(s)); dg/dA = -exp(A) * softplus(s); ddt = dg/da.
// CHECK-LABEL: linac.variant @gdn
// ONCE-LABEL: linac.variant @gdn
// CHECK: linac.map(%{{.*}}, %{{.*}}, %{{.*}}) {role = "grad:decay"}
// CHECK-NEXT: ^bb0(%[[X:.*]]: f32, %[[AL:.*]]: f32, %[[DT:.*]]: f32):
// CHECK-DAG: %[[S:.*]] = arith.addf %[[X]], %[[DT]] : f32
// CHECK-DAG: %[[E:.*]] = math.exp %[[S]] : f32
// CHECK-DAG: %[[SP:.*]] = math.log1p %[[E]] : f32
// CHECK-DAG: %[[EA:.*]] = math.exp %[[AL]] : f32
// CHECK: %[[NG:.*]] = arith.negf %{{.*}} : f32
// CHECK: %[[DEA:.*]] = arith.mulf %[[NG]], %[[SP]] : f32
// CHECK: %[[DSP:.*]] = arith.mulf %[[NG]], %[[EA]] : f32
// CHECK: %[[DAL:.*]] = arith.mulf %[[DEA]], %[[EA]] : f32
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[D1:.*]] = arith.addf %[[ONE]], %[[E]] : f32
// CHECK: %[[DE:.*]] = arith.divf %[[DSP]], %[[D1]] : f32
// CHECK: %[[DS:.*]] = arith.mulf %[[DE]], %[[E]] : f32
// CHECK: linac.yield %[[DS]], %[[DAL]], %[[DS]] : f32, f32, f32
linac.variant @gdn attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %A = linac.param "A_log" : !linac.field<constant, head>
  %dt = linac.param "dt_bias" : !linac.field<constant, head>
  %g = linac.map (%a, %A, %dt) {role = "decay"} : (!linac.field<token, head>, !linac.field<constant, head>, !linac.field<constant, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32, %alog: f32, %bias: f32):
    %s = arith.addf %x, %bias : f32
    %e = math.exp %s : f32
    %sp = math.log1p %e : f32
    %ea = math.exp %alog : f32
    %m = arith.mulf %ea, %sp : f32
    %r = arith.negf %m : f32
    linac.yield %r : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}

// -----

// Tied keys (HGRN-2: k = 1 - f, decay = log f) and the sigmoid / max forms.
// CHECK-LABEL: linac.variant @tied
// CHECK: {role = "grad:decay"}
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: arith.divf %[[ONE]], %{{.*}} : f32
// CHECK: {role = "grad:k"}
// CHECK: %[[C:.*]] = arith.cmpf oge, %{{.*}}, %{{.*}} : f32
// CHECK: arith.select %[[C]], %{{.*}}, %{{.*}} : f32
// CHECK: linac.yield
linac.variant @tied attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %fx = linac.input "f" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %g = linac.map (%fx) {role = "decay"} : (!linac.field<token, key>) -> !linac.field<token, key> {
  ^bb0(%x: f32):
    %one = arith.constant 1.0 : f32
    %n = arith.negf %x : f32
    %e = math.exp %n : f32
    %d = arith.addf %one, %e : f32
    %s = arith.divf %one, %d : f32
    %l = math.log %s : f32
    linac.yield %l : f32
  }
  %k = linac.map (%fx) {role = "k"} : (!linac.field<token, key>) -> !linac.field<token, key> {
  ^bb0(%x: f32):
    %zero = arith.constant 0.0 : f32
    %m = arith.maximumf %x, %zero : f32
    %t = math.tanh %m : f32
    linac.yield %t : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, key>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}

// -----

// A constant decay (a map without operands) has no derivative: no gradient map.
// CHECK-LABEL: linac.variant @constant
// CHECK: linac.map() {role = "decay"}
// CHECK-NOT: grad:decay
// CHECK: linac.recurrence
linac.variant @constant attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %g = linac.map () {role = "decay"} : () -> !linac.field<constant, scalar> {
    %c = arith.constant -5.000000e-01 : f32
    linac.yield %c : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%q : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<constant, scalar>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}

// -----

linac.variant @unsupported attributes {heads = 1 : i64, key_dim = 8 : i64, value_dim = 8 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %g = linac.map (%a) {role = "decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    // expected-error@+1 {{linac-differentiate: cannot differentiate 'math.sin'}}
    %s = math.sin %x : f32
    linac.yield %s : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}
