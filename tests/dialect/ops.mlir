// RUN: linac-opt %s | linac-opt | FileCheck %s
// Round trip of every op, type and attribute of the linac dialect.

// CHECK-LABEL: linac.variant @gated_deltanet attributes {heads = 4 : i64, key_dim = 256 : i64, value_dim = 512 : i64}
linac.variant @gated_deltanet attributes {heads = 4 : i64, key_dim = 256 : i64, value_dim = 512 : i64, chunk = 64 : i64} {
  // CHECK: %[[Q:.*]] = linac.input "q" {activation = #linac.activation<silu>, conv = 4 : i64, l2norm} : !linac.field<token, key>
  %q = linac.input "q" {conv = 4 : i64, activation = #linac.activation<silu>, l2norm, low_rank = 0 : i64, token_shift = false} : !linac.field<token, key>
  // CHECK: %[[K:.*]] = linac.input "k" {activation = #linac.activation<silu>, conv = 4 : i64, l2norm} : !linac.field<token, key>
  %k = linac.input "k" {conv = 4 : i64, activation = #linac.activation<silu>, l2norm} : !linac.field<token, key>
  // CHECK: %[[V:.*]] = linac.input "v" {activation = #linac.activation<silu>, conv = 4 : i64} : !linac.field<token, value>
  %v = linac.input "v" {conv = 4 : i64, activation = #linac.activation<silu>} : !linac.field<token, value>
  // CHECK: linac.input "a" {low_rank = 16 : i64, rope, token_shift = true} : !linac.field<token, head>
  %a = linac.input "a" {low_rank = 16 : i64, token_shift = true, rope} : !linac.field<token, head>
  %bx = linac.input "b" : !linac.field<token, head>
  %gx = linac.input "g" {activation = #linac.activation<silu>} : !linac.field<token, value>
  // CHECK: %[[A:.*]] = linac.param "A_log" {init = #linac.init<log_uniform>, init_args = array<f64: 1.000000e+00, 1.600000e+01>} : !linac.field<constant, head>
  %A = linac.param "A_log" {init = #linac.init<log_uniform>, init_args = array<f64: 1.0, 16.0>} : !linac.field<constant, head>
  %dt = linac.param "dt_bias" : !linac.field<constant, head>
  // CHECK: linac.index "head" : !linac.field<constant, head>
  %h = linac.index "head" : !linac.field<constant, head>
  // CHECK: linac.index "layer" : !linac.field<constant, scalar>
  %l = linac.index "layer" : !linac.field<constant, scalar>
  // CHECK: linac.index "num_layers" : !linac.field<constant, scalar>
  %n = linac.index "num_layers" : !linac.field<constant, scalar>
  // CHECK: %[[G:.*]] = linac.map(%{{.*}}, %[[A]], %{{.*}}) {role = "decay"} : (!linac.field<token, head>, !linac.field<constant, head>, !linac.field<constant, head>) -> !linac.field<token, head> {
  // CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32):
  // CHECK: math.log1p
  // CHECK: linac.yield %{{.*}} : f32
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
  // CHECK: %[[B:.*]]:2 = linac.map(%{{.*}}) : (!linac.field<token, head>) -> (!linac.field<token, head>, !linac.field<token, head>)
  %b:2 = linac.map (%bx) : (!linac.field<token, head>) -> (!linac.field<token, head>, !linac.field<token, head>) {
  ^bb0(%x: f32):
    %one = arith.constant 1.0 : f32
    %nx = arith.negf %x : f32
    %e = math.exp %nx : f32
    %d = arith.addf %one, %e : f32
    %s = arith.divf %one, %d : f32
    linac.yield %s, %x : f32, f32
  }
  // CHECK: %[[O:.*]] = linac.recurrence matrix delta inclusive q(%[[Q]] : !linac.field<token, key>) k(%[[K]] : !linac.field<token, key>) v(%[[V]] : !linac.field<token, value>) decay(%[[G]] : !linac.field<token, head>) beta(%[[B]]#0 : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) {scale = 6.250000e-02 : f64} -> !linac.field<token, value>
  %o = linac.recurrence matrix delta inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) beta(%b#0 : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) {scale = 0.0625 : f64} -> !linac.field<token, value>
  // CHECK: linac.output %[[O]] : !linac.field<token, value> norm(rmsnorm) gate(%{{.*}} : !linac.field<token, value>) residual(%[[V]] : !linac.field<token, value>)
  linac.output %o : !linac.field<token, value> norm(rmsnorm) gate(%gx : !linac.field<token, value>) residual(%v : !linac.field<token, value>)
}

// CHECK-LABEL: linac.variant @rwkv6
linac.variant @rwkv6 attributes {heads = 4 : i64, key_dim = 64 : i64, value_dim = 64 : i64} {
  %r = linac.input "r" {token_shift = true} : !linac.field<token, key>
  %k = linac.input "k" {token_shift = true} : !linac.field<token, key>
  %v = linac.input "v" {token_shift = true} : !linac.field<token, value>
  %w = linac.input "w" {token_shift = true, low_rank = 64 : i64} : !linac.field<token, key>
  %u = linac.param "u" {init = #linac.init<zeros>} : !linac.field<constant, key>
  // CHECK: linac.recurrence matrix additive exclusive_bonus q(%{{.*}}) k(%{{.*}}) v(%{{.*}}) decay(%{{.*}}) bonus(%{{.*}} : !linac.field<constant, key>) decay_class(diagonal) algorithm(chunk_additive) {tile = {chunk = 64 : i64}} -> !linac.field<token, value>
  %o = linac.recurrence matrix additive exclusive_bonus q(%r : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%w : !linac.field<token, key>) bonus(%u : !linac.field<constant, key>) decay_class(diagonal) algorithm(chunk_additive) {tile = {chunk = 64 : i64}} -> !linac.field<token, value>
  // CHECK: linac.output %{{.*}} : !linac.field<token, value> norm(groupnorm)
  linac.output %o : !linac.field<token, value> norm(groupnorm)
}

// CHECK-LABEL: linac.variant @hgrn
linac.variant @hgrn attributes {heads = 1 : i64, key_dim = 1 : i64, value_dim = 1024 : i64} {
  %i = linac.input "i" {activation = #linac.activation<silu>} : !linac.field<token, hidden>
  %f = linac.input "f" {activation = #linac.activation<sigmoid>} : !linac.field<token, hidden>
  // CHECK: linac.recurrence vector additive inclusive v(%{{.*}} : !linac.field<token, hidden>) decay(%{{.*}} : !linac.field<token, hidden>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, hidden>
  %o = linac.recurrence vector additive inclusive v(%i : !linac.field<token, hidden>) decay(%f : !linac.field<token, hidden>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, hidden>
  // CHECK: linac.output %{{.*}} : !linac.field<token, hidden> norm(none)
  linac.output %o : !linac.field<token, hidden> norm(none)
}

// CHECK: linac.attention @attention attributes {head_dim = 64 : i64, heads = 16 : i64, kv_heads = 4 : i64, rope, rope_theta = 1.000000e+04 : f64}
linac.attention @attention attributes {heads = 16 : i64, kv_heads = 4 : i64, head_dim = 64 : i64, rope_theta = 10000.0 : f64, rope}

// CHECK: linac.model @model attributes {attention = @attention, hidden = 1024 : i64, layers = [@gated_deltanet, @attention], linear = @gated_deltanet, num_layers = 2 : i64, schedule = "1:1", vocab = 32000 : i64}
linac.model @model attributes {hidden = 1024 : i64, vocab = 32000 : i64, num_layers = 2 : i64, schedule = "1:1", linear = @gated_deltanet, attention = @attention, layers = [@gated_deltanet, @attention]}
