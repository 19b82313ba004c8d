// Packed documents kept apart (`linac train --varlen`, as flame's varlen training does). Each row
// of a batch of tokens [B, T] holds documents joined end to end, each ending with the separator
// token. Given their Documents, the model treats every document as a sequence of its own: the
// recurrence starts from a zero state at a document's first token (cu_seqlens into the B * T
// tokens, as the kernels take them), the short convolution and the token shift read no token of
// the previous document, RoPE counts positions from the document's start, and attention attends
// within the document. The logits of a document are then those of the document alone.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace linac::model {

struct Documents {
  torch::Tensor positions;  // [B, T] int64: each token's offset in its document
  torch::Tensor ids;        // [B, T] int64: the document of each token, numbered over the batch
  torch::Tensor cuSeqlens;  // [N + 1] int64: the documents' starts in the B * T tokens, then B * T
};

/// The documents of `tokens` [B, T] (int64): one starts at each row's first token and after each
/// `separator`. The tensors are on tokens' device (cuSeqlens is read back to size it: one sync).
Documents documentsEndingWith(const torch::Tensor& tokens, int64_t separator);

/// x [B, T, ...] as one packed sequence [1, B * T, ...] (the layout cu_seqlens indexes).
torch::Tensor packRows(const torch::Tensor& x);

}  // namespace linac::model
