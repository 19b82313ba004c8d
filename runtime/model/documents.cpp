#include "model/documents.h"

#include <stdexcept>
#include <string>

namespace linac::model {

Documents documentsEndingWith(const torch::Tensor& tokens, int64_t separator) {
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kInt64)
    throw std::invalid_argument("documents: tokens must be int64 [B, T], got " + std::to_string(tokens.dim()) +
                                " dims");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const auto longs = tokens.options();
  // starts[b, t]: a document begins at t (the row's first token, or the token after a separator).
  torch::Tensor starts = torch::ones({B, T}, longs.dtype(torch::kBool));
  if (T > 1) starts.narrow(1, 1, T - 1).copy_(tokens.narrow(1, 0, T - 1) == separator);
  torch::Tensor index = torch::arange(T, longs).expand({B, T});
  torch::Tensor lastStart = std::get<0>(torch::cummax(torch::where(starts, index, torch::zeros_like(index)), 1));
  Documents d;
  d.positions = index - lastStart;                                       // [B, T]
  d.ids = torch::cumsum(starts.flatten(), 0).view({B, T}) - 1;            // [B, T]
  torch::Tensor first = starts.flatten().nonzero().flatten();             // [N]
  d.cuSeqlens = torch::cat({first, torch::full({1}, B * T, longs)});      // [N + 1]
  return d;
}

torch::Tensor packRows(const torch::Tensor& x) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape[1] *= shape[0];
  shape[0] = 1;
  return x.reshape(shape);
}

}  // namespace linac::model
