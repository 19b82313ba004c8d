// RUN: linac-opt %s -linac-pipeline | FileCheck %s
// The full buildLinacPipeline(pm, "cpu") on a Gated DeltaNet + attention model.

// CHECK-LABEL: linac.variant @gated_deltanet
// CHECK: {role = "decay"}
// CHECK: {role = "grad:decay"}
// CHECK: {role = "beta"}
// CHECK: {role = "grad:beta"}
// CHECK: linac.recurrence matrix delta inclusive {{.*}} decay_class(scalar) algorithm(chunk_delta) {fused = {available = true, beta = true, decay = true, k = "k", norm_k = true, norm_q = true, q = "q", v = "v"}, scale = 6.250000e-02 : f64, tile = {chunk = 64 : i64, precise_decay_grad = 1 : i64}}
linac.variant @gated_deltanet attributes {heads = 4 : i64, key_dim = 256 : i64, value_dim = 512 : i64} {
  %q = linac.input "q" {conv = 4 : i64, activation = #linac.activation<silu>, l2norm} : !linac.field<token, key>
  %k = linac.input "k" {conv = 4 : i64, activation = #linac.activation<silu>, l2norm} : !linac.field<token, key>
  %v = linac.input "v" {conv = 4 : i64, activation = #linac.activation<silu>} : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %bx = linac.input "b" : !linac.field<token, head>
  %gx = linac.input "g" {activation = #linac.activation<silu>} : !linac.field<token, value>
  %A = linac.param "A_log" {init = #linac.init<log_uniform>, init_args = array<f64: 1.0, 16.0>} : !linac.field<constant, head>
  %dt = linac.param "dt_bias" {init = #linac.init<dt_bias>, init_args = array<f64: 0.001, 0.1>} : !linac.field<constant, head>
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
  %b = linac.map (%bx) {role = "beta"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %one = arith.constant 1.0 : f32
    %nx = arith.negf %x : f32
    %e = math.exp %nx : f32
    %d = arith.addf %one, %e : f32
    %s = arith.divf %one, %d : f32
    linac.yield %s : f32
  }
  %o = linac.recurrence matrix delta inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) beta(%b : !linac.field<token, head>) decay_class(unknown) algorithm(unselected) {scale = 0.0625 : f64} -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm) gate(%gx : !linac.field<token, value>)
}
linac.attention @attention attributes {heads = 4 : i64, kv_heads = 4 : i64, head_dim = 64 : i64, rope, rope_theta = 10000.0 : f64}
linac.model @model attributes {hidden = 256 : i64, vocab = 256 : i64, num_layers = 4 : i64, schedule = "3:1", linear = @gated_deltanet, attention = @attention}
