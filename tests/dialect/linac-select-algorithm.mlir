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
