// RUN: linac-opt %s -linac-select-algorithm | FileCheck %s --check-prefix=CPU
// RUN: linac-opt %s -linac-select-algorithm=target=cuda | FileCheck %s --check-prefix=CUDA
// RUN: not linac-opt %s -linac-select-algorithm=target=tpu 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: linac-select-algorithm: unknown target 'tpu', expected 'cpu' or 'cuda'

// CPU-LABEL: linac.variant @delta
// CPU: algorithm(chunk_delta) {tile = {block_v = 64 : i64, chunk = 32 : i64}}
// CUDA-LABEL: linac.variant @delta
// CUDA: algorithm(chunk_delta) {tile = {block_v = 64 : i64, chunk = 32 : i64, num_warps = 4 : i64}}
linac.variant @delta attributes {heads = 2 : i64, key_dim = 128 : i64, value_dim = 128 : i64, chunk = 32 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %b = linac.input "b" : !linac.field<token, head>
  %o = linac.recurrence matrix delta inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) beta(%b : !linac.field<token, head>) decay_class(none) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// CPU-LABEL: linac.variant @additive
// CPU: algorithm(chunk_additive) {tile = {block_v = 32 : i64, chunk = 64 : i64}}
linac.variant @additive attributes {heads = 2 : i64, key_dim = 16 : i64, value_dim = 32 : i64} {
  %q = linac.input "q" : !linac.field<token, key>
  %k = linac.input "k" : !linac.field<token, key>
  %v = linac.input "v" : !linac.field<token, value>
  %o = linac.recurrence matrix additive inclusive q(%q : !linac.field<token, key>) k(%k : !linac.field<token, key>) v(%v : !linac.field<token, value>) decay_class(none) algorithm(unselected) -> !linac.field<token, value>
  linac.output %o : !linac.field<token, value> norm(rmsnorm)
}

// CPU-LABEL: linac.variant @hgrn
// CPU: algorithm(vector_scan) {tile = {chunk = 64 : i64}}
// CUDA-LABEL: linac.variant @hgrn
// CUDA: algorithm(vector_scan) {tile = {chunk = 64 : i64}}
linac.variant @hgrn attributes {heads = 1 : i64, key_dim = 1 : i64, value_dim = 64 : i64} {
  %i = linac.input "i" : !linac.field<token, hidden>
  %o = linac.recurrence vector additive inclusive v(%i : !linac.field<token, hidden>) decay_class(none) algorithm(unselected) -> !linac.field<token, hidden>
  linac.output %o : !linac.field<token, hidden> norm(rmsnorm)
}
