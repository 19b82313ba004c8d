// Helpers shared by the spec tests: fixture access and "expect exactly this diagnostic".
#pragma once

#include "linac/Spec/Diagnostic.h"
#include "linac/Spec/SpecParser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace linac::spec::test {

inline std::string fixturePath(const std::string& name) { return std::string(LINAC_SPEC_FIXTURES_DIR) + "/" + name; }

inline std::string readFixture(const std::string& name) {
  std::ifstream in(fixturePath(name), std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << name;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The rendered error that `f` throws, or "<no error>".
inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const SpecError& e) {
    return e.what();
  }
  return "<no error>";
}

/// Parses fixture `name` as a variant, reported under the stable name "fixtures/<name>".
inline std::string variantError(const std::string& name) {
  return errorOf([&] { parseVariant(readFixture(name), "fixtures/" + name); });
}

}  // namespace linac::spec::test
