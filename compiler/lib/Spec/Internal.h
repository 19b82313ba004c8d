// Shared pieces of the spec front end that are not part of the public contract: reading YAML
// with exact locations, field-by-field readers with did-you-mean, and the expression checks.
#pragma once

#include "linac/Spec/Diagnostic.h"
#include "linac/Spec/Spec.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace linac::spec::detail {

/// Where an expression string's characters lie in the file: the first character at (line, col);
/// after each '\n' in the string, the next character is at (line + 1, continuationCol).
struct TextOrigin {
  SourceLoc start;
  int continuationCol = 1;
};

/// Parses an expression with locations mapped through `origin`.
ExprPtr parseExprAt(std::string_view text, const TextOrigin& origin);

/// Rejects bytes that cannot be a text spec (NUL, invalid UTF-8), pointing at the first one.
void checkIsText(std::string_view text, const std::string& file);

/// Reads a whole file; a missing or unreadable file is a SpecError located at the path.
std::string readFile(const std::string& path);

/// "unknown <noun> 'word'; did you mean 'x'? (valid: a, b, c)"
SpecError unknownWord(const SourceLoc& loc, const std::string& noun, const std::string& word,
                      const std::vector<std::string>& valid);
std::string joinNames(const std::vector<std::string>& names);

/// One YAML document with its source text, so locations can be made exact.
class YamlDoc {
public:
  /// Checks the bytes, parses, and rejects an empty document. `what` names the kind of file in
  /// messages ("spec", "schedule", "preset").
  YamlDoc(std::string_view text, std::string file, const char* what);

  const YAML::Node& root() const { return root_; }
  const std::string& file() const { return file_; }

  /// The 1-based location of a node (yaml-cpp marks are 0-based); `fallback` when the node has
  /// no mark (e.g. an empty value).
  SourceLoc loc(const YAML::Node& node, const SourceLoc& fallback = {}) const;
  /// Where the first character of a scalar's value lies: past the quote of a quoted scalar, on
  /// the first content line of a block scalar.
  TextOrigin valueOrigin(const YAML::Node& node, const SourceLoc& fallback) const;

private:
  std::string file_;
  std::string text_;
  std::vector<size_t> lineStarts_;  // byte offset of each 0-based line
  YAML::Node root_;
};

/// A YAML mapping read field by field. Construction validates the keys: unknown ones (with a
/// did-you-mean) and duplicates are errors. `what` names the mapping in messages.
class MapReader {
public:
  MapReader(const YamlDoc& doc, const YAML::Node& node, const SourceLoc& where, std::string what,
            std::vector<std::string> fields);

  bool has(const std::string& key) const { return entries_.count(key) != 0; }
  /// The value node; throws "missing required field" when absent.
  const YAML::Node& require(const std::string& key) const;
  const YAML::Node* find(const std::string& key) const;
  SourceLoc keyLoc(const std::string& key) const;
  SourceLoc valueLoc(const std::string& key) const;
  const SourceLoc& loc() const { return loc_; }
  const std::string& what() const { return what_; }
  const YamlDoc& doc() const { return doc_; }
  /// The keys in file order.
  const std::vector<std::string>& keys() const { return order_; }

  std::string string(const std::string& key) const;
  std::string stringOr(const std::string& key, const std::string& dflt) const;
  /// An integer in [lo, hi]. Out of range (past int64 included): "field 'heads' must be between
  /// 1 and 1024, got 9223372036854775807".
  int64_t integerIn(const std::string& key, int64_t lo, int64_t hi) const;
  int64_t integerInOr(const std::string& key, int64_t lo, int64_t hi, int64_t dflt) const;
  /// A finite number.
  double number(const std::string& key) const;
  /// A finite number that a float32 holds (magnitude at most FLT_MAX): values the kernels and the
  /// generated code compute with.
  double float32(const std::string& key) const;
  bool boolean(const std::string& key, bool dflt) const;
  /// A required or optional expression (null when absent and optional).
  ExprPtr expr(const std::string& key, bool required) const;

  /// Reads an enumeration by its spelling; unknown spellings list the valid ones.
  template <typename E>
  E enumeration(const std::string& key, const std::vector<std::pair<std::string, E>>& table,
                E dflt, const char* noun) const {
    const YAML::Node* n = find(key);
    if (!n) return dflt;
    std::string word = scalarText(*n, key, "a word");
    std::vector<std::string> names;
    for (const auto& [name, value] : table) {
      if (name == word) return value;
      names.push_back(name);
    }
    throw unknownWord(valueLoc(key), noun, word, names);
  }

  /// The scalar text of a value node; throws "must be <expected>" for maps, sequences, nulls.
  std::string scalarText(const YAML::Node& n, const std::string& key, const char* expected) const;

private:
  struct Entry {
    YAML::Node key, value;
  };
  const YamlDoc& doc_;
  SourceLoc loc_;
  std::string what_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;
};

/// Strict number parsing (whole string, finite); false when the text is not a number.
bool parseInt64(std::string_view text, int64_t& out);
bool parseDouble(std::string_view text, double& out);
/// True for an optional sign and digits only: an integer, even one past the int64 range.
bool looksLikeInteger(std::string_view text);
/// True when |v| <= FLT_MAX (v finite).
bool fitsFloat32(double v);

/// Name resolution, definition cycles, function arity, extents and decay sign, and the structural
/// rules between sections (delta needs beta, ...). Throws the first SpecError found.
void analyzeVariant(const VariantSpec& spec);

/// True for the built-in names and function names, which inputs, params and defs may not take.
bool isBuiltinName(const std::string& name);

}  // namespace linac::spec::detail
