// RUN: linac-opt %s -split-input-file -verify-diagnostics -linac-plan-fused-prologue | FileCheck %s

// q and k are tiles; k is L2-normalised in the kernel (only the recurrence reads it), q is not
// (it has RoPE); decay and beta are computed by their maps.
// CHECK-LABEL: linac.variant @tiles
// CHECK: linac.recurrence {{.*}} {fused = {available = true, beta = true, decay = true, k = "k", norm_k = true, norm_q = false, q = "q", v = "v"}
linac.variant @tiles attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" {l2norm, rope} : !linac.field<token, key>
  %k = linac.input "k" {l2norm} : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %g = linac.map (%a) {role = "decay"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    %n = arith.negf %x : f32
    linac.yield %n : f32
  }
  %b = linac.map (%a) {role = "beta"} : (!linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x: f32):
    linac.yield %x : f32
  }
  %o = linac.recurrence matrix delta inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) beta(%b : !linac.field<token, head>) decay_class(scalar) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// -----

// k is computed by its map (a tied key); q's input is read elsewhere too, so it is normalised
// before the kernel; decay class none computes no decay.
// CHECK-LABEL: linac.variant @computed
// CHECK: {fused = {available = true, beta = false, decay = false, k = "", norm_k = false, norm_q = false, q = "q", v = "v"}
linac.variant @computed attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" {l2norm} : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %k = linac.map (%q) {role = "k"} : (!linac.field<token, key>) -> !linac.field<token, key> {
  ^bb0(%x: f32):
    %n = arith.negf %x : f32
    linac.yield %n : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(none) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// -----

// A vector state is not fused.
// CHECK-LABEL: linac.variant @vector
// CHECK: {fused = {available = false, reason = "vector state (the scan reads its operands materialised)"}}
linac.variant @vector attributes {heads = 1 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %v = linac.input "v" : !linac.field<token, value>
  %o = linac.recurrence vector additive inclusive v(%v : !linac.field<token, value>) decay_class(none) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(none)
}

// -----

// v must be a value input read as a tile.
// CHECK-LABEL: linac.variant @computed_v
// CHECK: {fused = {available = false, reason = "v is not a plain reference to a value input"}}
linac.variant @computed_v attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %x = linac.input "x" : !linac.field<token, value>
  %v = linac.map (%x) {role = "v"} : (!linac.field<token, value>) -> !linac.field<token, value> {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    linac.yield %n : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%q : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(none) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// -----

// A decay read straight from a parameter is neither a tile nor a map.
// CHECK-LABEL: linac.variant @param_decay
// CHECK: {fused = {available = false, reason = "decay is a plain reference the kernel cannot read as a tile"}}
linac.variant @param_decay attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %g = linac.param "g" : !linac.field<constant, head>
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%q : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<constant, head>) decay_class(fixed) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// -----

// A role map with more operands than the fused kernel takes.
// CHECK-LABEL: linac.variant @wide
// CHECK: {fused = {available = false, reason = "decay reads 5 operands (the fused kernel takes 4)"}}
linac.variant @wide attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %a = linac.input "a" : !linac.field<token, head>
  %b = linac.input "b" : !linac.field<token, head>
  %c = linac.input "c" : !linac.field<token, head>
  %d = linac.input "d" : !linac.field<token, head>
  %e = linac.input "e" : !linac.field<token, head>
  %g = linac.map (%a, %b, %c, %d, %e) {role = "decay"} : (!linac.field<token, head>, !linac.field<token, head>, !linac.field<token, head>, !linac.field<token, head>, !linac.field<token, head>) -> !linac.field<token, head> {
  ^bb0(%x0: f32, %x1: f32, %x2: f32, %x3: f32, %x4: f32):
    %s = arith.addf %x0, %x1 : f32
    linac.yield %s : f32
  }
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%q : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay(%g : !linac.field<token, head>) decay_class(scalar) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// -----

linac.variant @uninferred attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 16 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  // expected-error @below {{decay class not inferred (run linac-infer-decay-class before linac-plan-fused-prologue)}}
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%q : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(unknown) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}
