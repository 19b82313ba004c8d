#include "Args.h"

#include "linac/Spec/Diagnostic.h"

namespace linac::cli {

long long Args::getInt(const std::string& name, long long fallback) const {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError("--" + name + " expects an integer, got '" + it->second + "'");
}

Args parseArgs(int argc, char** argv, int first, const std::set<std::string>& valued,
               const std::set<std::string>& booleans) {
  Args args;
  std::vector<std::string> known(valued.begin(), valued.end());
  known.insert(known.end(), booleans.begin(), booleans.end());
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      args.positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool hasValue = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      hasValue = true;
    }
    if (valued.count(name)) {
      if (!hasValue) {
        if (i + 1 >= argc) throw UsageError("--" + name + " needs a value");
        value = argv[++i];
      }
      args.values[name] = value;
    } else if (booleans.count(name)) {
      if (hasValue) throw UsageError("--" + name + " takes no value");
      args.flags.insert(name);
    } else {
      std::string hint = spec::closestMatch(name, known);
      throw UsageError("unknown option '--" + name + "'" +
                       (hint.empty() ? "" : "; did you mean '--" + hint + "'?"));
    }
  }
  return args;
}

}  // namespace linac::cli
