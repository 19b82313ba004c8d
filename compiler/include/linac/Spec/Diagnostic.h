// Errors in user input. Every one renders as a single line
//   file:line:col: error: what went wrong, and what would be valid
// and is thrown as SpecError so that nothing is written when one occurs.
#pragma once

#include "linac/Spec/Spec.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace linac::spec {

class SpecError : public std::runtime_error {
public:
  SpecError(SourceLoc loc, std::string message);
  const SourceLoc& loc() const { return loc_; }
  const std::string& message() const { return message_; }  // without the location prefix
private:
  SourceLoc loc_;
  std::string message_;
};

/// One diagnostic line, "file:line:col: SEVERITY: message" (the file alone without a line).
std::string renderDiagnostic(const SourceLoc& loc, const std::string& severity, const std::string& message);

/// The closest candidate by edit distance, or "" when none is close enough to suggest.
std::string closestMatch(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace linac::spec
