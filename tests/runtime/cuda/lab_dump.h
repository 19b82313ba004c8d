// A kernel-lab case written to one file, so that a failing draw can be replayed on the host
// (tests/runtime/cuda/delta_bwd_host_check.py --replay FILE): the lab draws every case from one
// random stream, so a draw cannot be regenerated without running every case before it.
//
// File layout: one line of JSON, then the arrays' bytes back to back (little-endian, as the GPU
// machines are). The JSON holds the case's fields ("meta") and, per array, its name, element type
// ("f32" or "f64"), shape and byte offset from the start of the payload:
//   {"meta": {"kind": "delta-scalar", "B": 2, ...},
//    "arrays": [{"name": "q", "dtype": "f32", "shape": [2, 130, 2, 64], "offset": 0}, ...]}
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace lab {

class CaseDump {
 public:
  void meta(const std::string& key, const std::string& value) { addField(key, quoted(value)); }
  void meta(const std::string& key, double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", value);
    addField(key, text);
  }
  void meta(const std::string& key, const std::vector<int64_t>& values) {
    std::string list = "[";
    for (size_t i = 0; i < values.size(); ++i) list += (i ? ", " : "") + std::to_string(values[i]);
    addField(key, list + "]");
  }

  /// An array of the given shape (the product of `shape` must equal x.size()); empty arrays are
  /// left out (absent inputs, such as h0 when the case has none).
  template <class Scalar>
  void array(const std::string& name, const std::vector<Scalar>& x, const std::vector<int64_t>& shape) {
    static_assert(sizeof(Scalar) == 4 || sizeof(Scalar) == 8, "f32 or f64");
    if (x.empty()) return;
    std::string dims = "[";
    for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
    arrays_ += std::string(arrays_.empty() ? "" : ", ") + "{\"name\": " + quoted(name) + ", \"dtype\": \"" +
               (sizeof(Scalar) == 4 ? "f32" : "f64") + "\", \"shape\": " + dims + "], \"offset\": " +
               std::to_string(payload_.size()) + "}";
    const auto* bytes = reinterpret_cast<const uint8_t*>(x.data());
    payload_.insert(payload_.end(), bytes, bytes + x.size() * sizeof(Scalar));
  }

  /// Writes the file; false (and nothing half-written is kept) where it cannot.
  bool write(const std::string& path) const {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    const std::string header = "{\"meta\": {" + fields_ + "}, \"arrays\": [" + arrays_ + "]}\n";
    const bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
                    std::fwrite(payload_.data(), 1, payload_.size(), f) == payload_.size();
    if (std::fclose(f) != 0 || !ok) {
      std::remove(path.c_str());
      return false;
    }
    return true;
  }

 private:
  static std::string quoted(const std::string& s) {  // names and labels: no quotes or backslashes
    return "\"" + s + "\"";
  }
  void addField(const std::string& key, const std::string& json) {
    fields_ += (fields_.empty() ? "" : ", ") + quoted(key) + ": " + json;
  }

  std::string fields_, arrays_;
  std::vector<uint8_t> payload_;
};

}  // namespace lab
