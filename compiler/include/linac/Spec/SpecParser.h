// Reading specs from YAML. All functions throw SpecError (Diagnostic.h) on bad input.
#pragma once

#include "linac/Spec/Spec.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace linac::spec {

/// Parses and validates a variant spec. `file` is used in locations and the hash.
VariantSpec parseVariant(std::string_view text, const std::string& file);
VariantSpec loadVariant(const std::string& path);

/// Parses an expression string that starts at `start` (line/col of its first character).
ExprPtr parseExpr(std::string_view text, const SourceLoc& start);

/// A schedule as given on the command line ("3:1", "pure", "transformer", "3,7,11") or a
/// schedule file (specs/schedules/*.yaml).
ScheduleSpec parseSchedule(std::string_view text, const SourceLoc& where);
ScheduleSpec loadSchedule(const std::string& pathOrText);
/// The contents of a schedule file (a mapping with `schedule:` or `attention_layers:`).
ScheduleSpec parseScheduleFile(std::string_view text, const std::string& file);
/// A schedule text (a form parseSchedule takes) expanded over `numLayers` layers, for code that
/// does not use exceptions (the dialect's linac.model): on bad text or an index out of range,
/// nullopt, with `error` set to the message parseSchedule or ScheduleSpec::expand gives.
std::optional<std::vector<bool>> expandScheduleText(std::string_view text, int64_t numLayers,
                                                    std::string& error);

/// A preset by name (searched in `presetDir`) or path.
PresetSpec loadPreset(const std::string& nameOrPath, const std::string& presetDir);
/// The contents of a preset file (specs/presets/*.yaml).
PresetSpec parsePreset(std::string_view text, const std::string& file);

/// Hex SHA-256 of bytes (used for spec hashes).
std::string sha256Hex(std::string_view bytes);

}  // namespace linac::spec
