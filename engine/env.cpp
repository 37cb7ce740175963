// env.cpp: environment access (see env.h).
#include "engine/env.h"

#include <algorithm>
#include <cstdlib>

extern char** environ;  // POSIX: the process environment, NAME=value strings

namespace sg {

std::optional<std::string> read_env(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

std::vector<std::string> env_names_with_prefix(std::string_view prefix) {
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (name.substr(0, prefix.size()) == prefix) names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace sg
