// Reading YAML with exact file:line:col locations, and the field readers every parser uses.
#include "Internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace linac::spec::detail {
namespace {

SourceLoc byteLoc(std::string_view text, size_t offset, const std::string& file) {
  SourceLoc loc{file, 1, 1};
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++loc.line;
      loc.col = 1;
    } else {
      ++loc.col;
    }
  }
  return loc;
}

/// Length of the UTF-8 sequence starting at text[i], or 0 when it is malformed (overlong forms,
/// surrogates and code points past U+10FFFF included).
size_t utf8Length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
  else return 0;
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

const char* nodeKindName(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "a scalar";
    default: return "nothing";
  }
}

}  // namespace

void checkIsText(std::string_view text, const std::string& file) {
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\0')
      throw SpecError(byteLoc(text, i, file), "file is not text: NUL byte at offset " + std::to_string(i));
    size_t len = utf8Length(text, i);
    if (len == 0)
      throw SpecError(byteLoc(text, i, file),
                      fmt::format("file is not text: invalid UTF-8 byte 0x{:02x} at offset {}",
                                  static_cast<unsigned char>(text[i]), i));
    i += len;
  }
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(SourceLoc{path, 0, 0}, fmt::format("cannot read file: {}", std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw SpecError(SourceLoc{path, 0, 0}, "cannot read file: read error");
  return ss.str();
}

bool parseInt64(std::string_view text, int64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

bool parseDouble(std::string_view text, double& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(out);
}

bool looksLikeInteger(std::string_view text) {
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool fitsFloat32(double v) { return std::isfinite(v) && std::fabs(v) <= FLT_MAX; }

// ----- YamlDoc ---------------------------------------------------------------------------------

YamlDoc::YamlDoc(std::string_view text, std::string file, const char* what)
    : file_(std::move(file)), text_(text) {
  checkIsText(text_, file_);
  lineStarts_.push_back(0);
  for (size_t i = 0; i < text_.size(); ++i)
    if (text_[i] == '\n') lineStarts_.push_back(i + 1);
  try {
    root_ = YAML::Load(text_);
  } catch (const YAML::Exception& e) {
    // yaml-cpp marks are 0-based; a missing mark (-1) becomes the start of the file.
    SourceLoc loc{file_, std::max(e.mark.line, 0) + 1, std::max(e.mark.column, 0) + 1};
    throw SpecError(loc, "invalid YAML: " + e.msg);
  }
  if (!root_.IsDefined() || root_.IsNull())
    throw SpecError(SourceLoc{file_, 1, 1}, fmt::format("empty {} file; expected a mapping of fields", what));
  if (!root_.IsMap())
    throw SpecError(loc(root_, SourceLoc{file_, 1, 1}),
                    fmt::format("a {} file must be a mapping of fields, got {}", what, nodeKindName(root_)));
}

SourceLoc YamlDoc::loc(const YAML::Node& node, const SourceLoc& fallback) const {
  YAML::Mark m = node.Mark();
  if (m.is_null() || m.line < 0 || m.column < 0) {
    SourceLoc f = fallback;
    if (f.file.empty()) f.file = file_;
    return f;
  }
  return SourceLoc{file_, m.line + 1, m.column + 1};
}

TextOrigin YamlDoc::valueOrigin(const YAML::Node& node, const SourceLoc& fallback) const {
  TextOrigin origin{loc(node, fallback), 1};
  YAML::Mark m = node.Mark();
  if (m.is_null() || m.pos < 0 || static_cast<size_t>(m.pos) >= text_.size()) return origin;
  const char c = text_[static_cast<size_t>(m.pos)];
  if (c == '"' || c == '\'') {
    ++origin.start.col;  // the mark is the opening quote
  } else if (c == '|' || c == '>') {
    // A block scalar's content starts on the first non-blank line after the indicator, at that
    // line's indentation; every content line shares it.
    for (size_t line = static_cast<size_t>(m.line) + 1; line < lineStarts_.size(); ++line) {
      size_t p = lineStarts_[line];
      size_t indent = 0;
      while (p + indent < text_.size() && text_[p + indent] == ' ') ++indent;
      if (p + indent < text_.size() && text_[p + indent] != '\n' && text_[p + indent] != '\r') {
        origin.start.line = static_cast<int>(line) + 1;
        origin.start.col = static_cast<int>(indent) + 1;
        origin.continuationCol = origin.start.col;
        break;
      }
    }
  }
  return origin;
}

// ----- MapReader -------------------------------------------------------------------------------

MapReader::MapReader(const YamlDoc& doc, const YAML::Node& node, const SourceLoc& where,
                     std::string what, std::vector<std::string> fields)
    : doc_(doc), loc_(doc.loc(node, where)), what_(std::move(what)) {
  if (!node.IsMap())
    throw SpecError(loc_, fmt::format("{} must be a mapping of fields, got {}", what_, nodeKindName(node)));
  for (auto it = node.begin(); it != node.end(); ++it) {
    // Copies: the iterator's pair is a temporary proxy.
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    SourceLoc kloc = doc.loc(key, loc_);
    if (!key.IsScalar())
      throw SpecError(kloc, fmt::format("field names in {} must be words, got {}", what_, nodeKindName(key)));
    const std::string& name = key.Scalar();
    if (std::find(fields.begin(), fields.end(), name) == fields.end()) {
      std::string msg = fmt::format("unknown field '{}' in {}", name, what_);
      std::string guess = closestMatch(name, fields);
      if (!guess.empty()) msg += fmt::format("; did you mean '{}'?", guess);
      else msg += fmt::format(" (valid: {})", joinNames(fields));
      throw SpecError(kloc, msg);
    }
    auto [prev, inserted] = entries_.emplace(name, Entry{key, value});
    if (!inserted)
      throw SpecError(kloc, fmt::format("duplicate field '{}' in {} (first given at line {})", name,
                                        what_, doc.loc(prev->second.key, loc_).line));
    order_.push_back(name);
  }
}

const YAML::Node* MapReader::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second.value;
}

const YAML::Node& MapReader::require(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end())
    throw SpecError(loc_, fmt::format("missing required field '{}' in {}", key, what_));
  return it->second.value;
}

SourceLoc MapReader::keyLoc(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? loc_ : doc_.loc(it->second.key, loc_);
}

SourceLoc MapReader::valueLoc(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return loc_;
  // An empty value has no mark of its own: point at its key.
  return doc_.loc(it->second.value, doc_.loc(it->second.key, loc_));
}

std::string MapReader::scalarText(const YAML::Node& n, const std::string& key, const char* expected) const {
  if (!n.IsScalar())
    throw SpecError(doc_.loc(n, keyLoc(key)),
                    fmt::format("field '{}' must be {}, got {}", key, expected, nodeKindName(n)));
  return n.Scalar();
}

std::string MapReader::string(const std::string& key) const {
  return scalarText(require(key), key, "a string");
}

std::string MapReader::stringOr(const std::string& key, const std::string& dflt) const {
  return has(key) ? string(key) : dflt;
}

int64_t MapReader::integerIn(const std::string& key, int64_t lo, int64_t hi) const {
  std::string text = scalarText(require(key), key, "an integer");
  int64_t v = 0;
  const bool parsed = parseInt64(text, v);
  if (!parsed && !looksLikeInteger(text))
    throw SpecError(valueLoc(key), fmt::format("field '{}' must be an integer, got '{}'", key, text));
  if (!parsed || v < lo || v > hi)
    throw SpecError(valueLoc(key), fmt::format("field '{}' must be between {} and {}, got {}", key, lo, hi, text));
  return v;
}

int64_t MapReader::integerInOr(const std::string& key, int64_t lo, int64_t hi, int64_t dflt) const {
  return has(key) ? integerIn(key, lo, hi) : dflt;
}

double MapReader::number(const std::string& key) const {
  std::string text = scalarText(require(key), key, "a number");
  double v = 0;
  if (!parseDouble(text, v))
    throw SpecError(valueLoc(key), fmt::format("field '{}' must be a finite number, got '{}'", key, text));
  return v;
}

double MapReader::float32(const std::string& key) const {
  const double v = number(key);
  if (!fitsFloat32(v))
    throw SpecError(valueLoc(key), fmt::format("field '{}' must be a float32 number (magnitude at most {}), got {}",
                                               key, FLT_MAX, v));
  return v;
}

bool MapReader::boolean(const std::string& key, bool dflt) const {
  if (!has(key)) return dflt;
  std::string text = scalarText(require(key), key, "true or false");
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  throw SpecError(valueLoc(key), fmt::format("field '{}' must be true or false, got '{}'", key, text));
}

ExprPtr MapReader::expr(const std::string& key, bool required) const {
  if (!required && !has(key)) return nullptr;
  const YAML::Node& n = require(key);
  std::string text = scalarText(n, key, "an expression string");
  return parseExprAt(text, doc_.valueOrigin(n, valueLoc(key)));
}

}  // namespace linac::spec::detail
