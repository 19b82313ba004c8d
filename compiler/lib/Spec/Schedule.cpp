// Layer schedules: which layers of the hybrid stack are full attention. Forms: "R:1" (blocks of
// R linear layers then one attention layer), "pure", "transformer", an explicit list of 0-based
// attention layer indices ("3,7,11" or "[3, 7, 11]"), or a schedule file wrapping one of these.
#include "Internal.h"
#include "linac/Spec/Limits.h"
#include "linac/Spec/SpecParser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

namespace linac::spec {
namespace {

// Where a schedule given on the command line is reported.
const char* const kCommandLine = "--schedule";
// Far beyond any model depth; the bound keeps ratio + 1 from overflowing in expand().
constexpr int64_t kMaxRatio = 1'000'000;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

SourceLoc offsetLoc(const SourceLoc& where, size_t offset) {
  SourceLoc loc = where;
  if (loc.line > 0) loc.col += static_cast<int>(offset);
  return loc;
}

SpecError unknownSchedule(const SourceLoc& where, std::string_view text) {
  return SpecError(where, fmt::format("unknown schedule '{}'; expected 'R:1' (e.g. '3:1'), 'pure', "
                                      "'transformer' or a comma-separated list of attention layer "
                                      "indices (e.g. '3,7,11')",
                                      text));
}

bool allDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

ScheduleSpec parseSchedule(std::string_view text, const SourceLoc& where) {
  ScheduleSpec s;
  s.loc = where;
  const std::string_view body = trim(text);
  s.text = std::string(body);
  const size_t lead = static_cast<size_t>(body.data() - text.data());
  if (body == "pure") {
    s.kind = ScheduleKind::Pure;
    return s;
  }
  if (body == "transformer") {
    s.kind = ScheduleKind::Transformer;
    return s;
  }
  if (size_t colon = body.find(':'); colon != std::string_view::npos) {
    std::string_view r = trim(body.substr(0, colon)), one = trim(body.substr(colon + 1));
    if (!allDigits(r) || one != "1") throw unknownSchedule(where, body);
    if (!detail::parseInt64(r, s.ratio) || s.ratio < 1 || s.ratio > kMaxRatio)
      throw SpecError(offsetLoc(where, lead),
                      fmt::format("schedule ratio must be between 1:1 and {}:1, got '{}'", kMaxRatio, body));
    s.kind = ScheduleKind::Ratio;
    return s;
  }
  // An explicit list, with optional brackets.
  std::string_view list = body;
  size_t base = lead;
  if (list.size() >= 2 && list.front() == '[' && list.back() == ']') {
    list = list.substr(1, list.size() - 2);
    ++base;
  }
  if (list.empty() || !std::isdigit(static_cast<unsigned char>(trim(list).empty() ? ' ' : trim(list).front())))
    throw unknownSchedule(where, body);
  std::set<int64_t> seen;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view item = list.substr(start, comma - start);
    std::string_view word = trim(item);
    const size_t at = base + start + static_cast<size_t>(word.data() - item.data());
    int64_t index = 0;
    if (!allDigits(word) || !detail::parseInt64(word, index))
      throw SpecError(offsetLoc(where, at), fmt::format("attention layer index '{}' in schedule '{}' is not a non-negative integer", word, body));
    if (!seen.insert(index).second)
      throw SpecError(offsetLoc(where, at), fmt::format("attention layer index {} is listed twice", index));
    start = comma + 1;
  }
  s.kind = ScheduleKind::Explicit;
  s.attentionLayers.assign(seen.begin(), seen.end());
  return s;
}

std::vector<bool> ScheduleSpec::expand(int64_t numLayers) const {
  if (numLayers < 1 || numLayers > limits::kMaxLayers)
    throw SpecError(loc, fmt::format("layer count must be between 1 and {}, got {}", limits::kMaxLayers, numLayers));
  std::vector<bool> attn(static_cast<size_t>(numLayers), false);
  switch (kind) {
    case ScheduleKind::Pure: break;
    case ScheduleKind::Transformer: attn.assign(attn.size(), true); break;
    case ScheduleKind::Ratio: {
      bool any = false;
      for (int64_t i = 0; i < numLayers; ++i)
        if ((i + 1) % (ratio + 1) == 0) attn[static_cast<size_t>(i)] = any = true;
      // A block longer than the model (24:1 on 24 layers) still means one attention layer: the
      // last, as the study's hybrids keep at least one.
      if (!any) attn.back() = true;
      break;
    }
    case ScheduleKind::Explicit:
      for (int64_t i : attentionLayers) {
        if (i < 0 || i >= numLayers)
          throw SpecError(loc, fmt::format("attention layer index {} is out of range for a {}-layer model (valid: 0..{})",
                                           i, numLayers, numLayers - 1));
        attn[static_cast<size_t>(i)] = true;
      }
      break;
  }
  return attn;
}

ScheduleSpec parseScheduleFile(std::string_view text, const std::string& file) {
  detail::YamlDoc doc(text, file, "schedule");
  detail::MapReader r(doc, doc.root(), SourceLoc{file, 1, 1}, "schedule",
                      {"name", "description", "schedule", "attention_layers"});
  if (r.has("schedule") == r.has("attention_layers"))
    throw SpecError(r.loc(), "a schedule file needs exactly one of 'schedule' or 'attention_layers'");
  if (r.has("schedule")) {
    const YAML::Node& n = r.require("schedule");
    std::string body = r.scalarText(n, "schedule", "a schedule string");
    return parseSchedule(body, doc.valueOrigin(n, r.valueLoc("schedule")).start);
  }
  const YAML::Node& n = r.require("attention_layers");
  ScheduleSpec s;
  s.kind = ScheduleKind::Explicit;
  s.loc = r.valueLoc("attention_layers");
  if (!n.IsSequence()) throw SpecError(s.loc, "field 'attention_layers' must be a list of layer indices");
  std::set<int64_t> seen;
  for (const YAML::Node& item : n) {
    int64_t index = 0;
    SourceLoc at = doc.loc(item, s.loc);
    if (!item.IsScalar() || !allDigits(item.Scalar()) || !detail::parseInt64(item.Scalar(), index))
      throw SpecError(at, "attention layer indices must be non-negative integers");
    if (!seen.insert(index).second)
      throw SpecError(at, fmt::format("attention layer index {} is listed twice", index));
  }
  s.attentionLayers.assign(seen.begin(), seen.end());
  for (size_t i = 0; i < s.attentionLayers.size(); ++i) {
    if (i) s.text += ',';
    s.text += std::to_string(s.attentionLayers[i]);
  }
  return s;
}

std::optional<std::vector<bool>> expandScheduleText(std::string_view text, int64_t numLayers, std::string& error) {
  try {
    return parseSchedule(text, SourceLoc{}).expand(numLayers);
  } catch (const SpecError& e) {
    error = e.message();
    return std::nullopt;
  }
}

ScheduleSpec loadSchedule(const std::string& pathOrText) {
  std::error_code ec;
  const bool looksLikeFile = pathOrText.ends_with(".yaml") || pathOrText.ends_with(".yml");
  if (looksLikeFile || std::filesystem::is_regular_file(pathOrText, ec))
    return parseScheduleFile(detail::readFile(pathOrText), pathOrText);
  return parseSchedule(pathOrText, SourceLoc{kCommandLine, 0, 0});
}

}  // namespace linac::spec
