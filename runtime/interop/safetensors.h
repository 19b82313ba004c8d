// The safetensors format (Hugging Face's weight files): an 8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then
// the tensors' raw little-endian bytes, offsets relative to the end of the header. Read and
// written here with nlohmann-json for the header (no safetensors C++ library is packaged for
// Debian); F32, F16, BF16 and F64 tensors. A model saved in shards has a
// model.safetensors.index.json whose weight_map names each tensor's file.
#pragma once

#include <torch/torch.h>

#include <map>
#include <stdexcept>
#include <string>

namespace linac::interop {

/// A file that is not valid safetensors, or an unsupported dtype; the message names the file.
class FormatError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct TensorFile {
  std::map<std::string, torch::Tensor> tensors;   // CPU tensors in the file's dtypes
  std::map<std::string, std::string> metadata;    // "__metadata__" (e.g. {"format": "pt"})
};

/// Reads one .safetensors file: every header entry checked (known dtype, offsets inside the
/// data, end - begin = numel * element size, no two tensors overlapping).
TensorFile readSafetensors(const std::string& path);

/// Writes `tensors` (each made contiguous, on the CPU; dtype F32 / F16 / BF16 / F64) to `path`
/// atomically (PATH.tmp, fsync, rename); the header is padded with spaces to a multiple of 8.
void writeSafetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata);

/// The tensors of a saved model directory: DIR/model.safetensors, or the shards that
/// DIR/model.safetensors.index.json lists (each tensor in the file its weight_map names).
/// Throws FormatError when neither exists or a shard lacks a tensor the index maps to it.
std::map<std::string, torch::Tensor> readModelTensors(const std::string& dir);

}  // namespace linac::interop
