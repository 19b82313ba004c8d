// lab_dump_writer: writes a lab_dump.h file from raw arrays, so that the format the kernel lab
// writes (lab_backward.cu, --dump-failing) and the one delta_bwd_replay.py reads are checked
// against each other without a GPU (delta_bwd_replay.py --self-test runs it).
// Usage: lab_dump_writer OUT [KEY=TEXT | KEY#=NUMBER | KEY@=N,N,...]...
//                            [f32:NAME=PATH:D,D,... | f64:NAME=PATH:D,D,...]...
// PATH holds the array's raw little-endian values; D,D,... is its shape. Exit 1 on a bad argument
// or an I/O error.
#include "lab_dump.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

/// The whole of `text` as a V, else invalid_argument naming `what`.
template <class V>
V parsed(const std::string& text, const char* what) {
  V value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    throw std::invalid_argument(std::string("not ") + what + ": " + text);
  return value;
}

std::vector<int64_t> integers(const std::string& text) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t comma = text.find(',', pos);
    out.push_back(parsed<int64_t>(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos),
                                  "an integer"));
    pos = comma == std::string::npos ? text.size() : comma + 1;
  }
  return out;
}

template <class Scalar>
std::vector<Scalar> readRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(Scalar)) throw std::runtime_error(path + ": not a whole number of values");
  std::vector<Scalar> values(bytes.size() / sizeof(Scalar));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(values.data()));
  return values;
}

template <class Scalar>
void addArray(lab::CaseDump& dump, const std::string& spec) {  // NAME=PATH:D,D,...
  const size_t eq = spec.find('='), colon = spec.rfind(':');
  if (eq == std::string::npos || colon == std::string::npos || colon < eq)
    throw std::invalid_argument("array: " + spec);
  const auto shape = integers(spec.substr(colon + 1));
  const auto values = readRaw<Scalar>(spec.substr(eq + 1, colon - eq - 1));
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  if (count != int64_t(values.size())) throw std::invalid_argument("shape does not match the values: " + spec);
  dump.array(spec.substr(0, eq), values, shape);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lab_dump_writer OUT [KEY=TEXT | KEY#=NUMBER | KEY@=N,...]... [f32:|f64:NAME=PATH:SHAPE]...\n");
    return 1;
  }
  try {
    lab::CaseDump dump;
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("f32:", 0) == 0) { addArray<float>(dump, arg.substr(4)); continue; }
      if (arg.rfind("f64:", 0) == 0) { addArray<double>(dump, arg.substr(4)); continue; }
      const size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0) throw std::invalid_argument("field: " + arg);
      const std::string value = arg.substr(eq + 1);
      if (arg[eq - 1] == '#') dump.meta(arg.substr(0, eq - 1), parsed<double>(value, "a number"));
      else if (arg[eq - 1] == '@') dump.meta(arg.substr(0, eq - 1), integers(value));
      else dump.meta(arg.substr(0, eq), value);
    }
    if (!dump.write(argv[1])) throw std::runtime_error(std::string("cannot write ") + argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lab_dump_writer: %s\n", e.what());
    return 1;
  }
  return 0;
}
