#include "interop/safetensors.h"

#include "trainer/file_io.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

namespace linac::interop {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

using Json = nlohmann::json;

/// Header lengths beyond this are a damaged file, not a model (the format's own limit).
constexpr uint64_t kMaxHeaderBytes = 100u * 1024 * 1024;
constexpr size_t kHeaderAlign = 8;

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};
constexpr DtypeName kDtypes[] = {{"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
                                 {"F64", torch::kFloat64}};

torch::ScalarType parseDtype(const std::string& name, const std::string& where) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.type;
  throw FormatError(where + ": dtype " + name + " is not supported (F32, F16, BF16, F64)");
}

const char* dtypeName(torch::ScalarType type, const std::string& tensor) {
  for (const auto& d : kDtypes)
    if (type == d.type) return d.name;
  throw FormatError("safetensors: tensor " + tensor + " has dtype " + std::string(c10::toString(type)) +
                    ", not one of F32, F16, BF16, F64");
}

}  // namespace

TensorFile readSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError("cannot open " + path);
  in.seekg(0, std::ios::end);
  const uint64_t fileBytes = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  uint64_t headerBytes = 0;
  if (fileBytes < sizeof headerBytes || !in.read(reinterpret_cast<char*>(&headerBytes), sizeof headerBytes))
    throw FormatError(path + " is too short to be a safetensors file");
  if (headerBytes > kMaxHeaderBytes || headerBytes > fileBytes - sizeof headerBytes)
    throw FormatError(path + ": header length " + std::to_string(headerBytes) + " does not fit the file (" +
                      std::to_string(fileBytes) + " bytes): not a safetensors file, or truncated");
  std::string headerText(headerBytes, '\0');
  in.read(headerText.data(), static_cast<std::streamsize>(headerBytes));
  const Json header = Json::parse(headerText, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) throw FormatError(path + ": the header is not a JSON object");
  const uint64_t dataStart = sizeof headerBytes + headerBytes, dataBytes = fileBytes - dataStart;

  TensorFile out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    const std::string where = path + ": tensor " + name;
    if (name == "__metadata__") {
      if (!entry.is_object()) throw FormatError(path + ": __metadata__ is not an object");
      for (const auto& [key, value] : entry.items())
        if (value.is_string()) out.metadata[key] = value.get<std::string>();
      continue;
    }
    try {
      const torch::ScalarType type = parseDtype(entry.at("dtype").get<std::string>(), where);
      const std::vector<int64_t> shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > dataBytes)
        throw FormatError(where + ": data_offsets lie outside the file's " + std::to_string(dataBytes) +
                          " data bytes (truncated?)");
      torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type));
      const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
      if (offsets[1] - offsets[0] != bytes)
        throw FormatError(where + ": " + std::to_string(offsets[1] - offsets[0]) + " bytes for a tensor of " +
                          std::to_string(bytes));
      in.seekg(static_cast<std::streamoff>(dataStart + offsets[0]));
      if (bytes && !in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes)))
        throw FormatError(where + ": cannot read its bytes");
      ranges.emplace_back(offsets[0], offsets[1]);
      out.tensors[name] = t;
    } catch (const Json::exception& e) {
      throw FormatError(where + ": malformed header entry (" + e.what() + ")");
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) throw FormatError(path + ": two tensors share data bytes");
  return out;
}

void writeSafetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;  // in header order: contiguous CPU copies
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") throw FormatError("safetensors: a tensor may not be named __metadata__");
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtypeName(t.scalar_type(), name)}, {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  std::string text = header.dump();
  text.append((kHeaderAlign - text.size() % kHeaderAlign) % kHeaderAlign, ' ');
  const uint64_t headerBytes = text.size();

  trainer::detail::AtomicFile file(path);
  file.write(std::string_view(reinterpret_cast<const char*>(&headerBytes), sizeof headerBytes));
  file.write(text);
  for (const auto& t : data)
    file.write(std::string_view(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * t.element_size()));
  file.commit();
}

std::map<std::string, torch::Tensor> readModelTensors(const std::string& dir) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (trainer::detail::pathExists(single)) return readSafetensors(single).tensors;
  const auto indexText = trainer::detail::readFileIfExists(index);
  if (!indexText)
    throw FormatError(dir + " holds neither model.safetensors nor model.safetensors.index.json (a model saved "
                      "with save_pretrained(..., safe_serialization=True))");
  const Json j = Json::parse(*indexText, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw FormatError(index + " has no weight_map object");
  std::map<std::string, std::set<std::string>> byFile;  // shard -> tensors the index puts there
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw FormatError(index + ": weight_map[" + name + "] is not a file name");
    byFile[file.get<std::string>()].insert(name);
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& [file, names] : byFile) {
    TensorFile shard = readSafetensors(dir + "/" + file);
    for (const auto& name : names) {
      auto it = shard.tensors.find(name);
      if (it == shard.tensors.end()) throw FormatError(index + " maps " + name + " to " + file + ", which lacks it");
      out[name] = it->second;
    }
  }
  return out;
}

}  // namespace linac::interop
