// RUN: linac-opt %s -split-input-file -linac-expand-schedule | FileCheck %s

// CHECK: layers = [@l, @l, @l, @a, @l, @l, @l, @a, @l, @l]
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 10 : i64, schedule = "3:1", linear = @l, attention = @a}

// -----

// CHECK: layers = [@l, @l, @l]
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 3 : i64, schedule = "pure", linear = @l}

// -----

// CHECK: layers = [@a, @a]
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 2 : i64, schedule = "transformer", attention = @a}

// -----

// CHECK: layers = [@l, @a, @l, @l, @a]
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 5 : i64, schedule = "1, 4", linear = @l, attention = @a}

// -----

// A block longer than the model still has its attention layer, the last (as in `linac train`).
// CHECK: layers = [@l, @l, @l, @a]
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 4 : i64, schedule = "6:1", linear = @l, attention = @a}

// -----

// Already expanded: recomputed, unchanged.
// CHECK: layers = [@l, @a]
linac.model @m attributes {hidden = 64 : i64, vocab = 256 : i64, num_layers = 2 : i64, schedule = "1:1", linear = @l, attention = @a, layers = [@l, @a]}
