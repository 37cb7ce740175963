// env.cpp: environment access (see env.h).
#include "engine/env.h"

#include <cstdlib>

namespace sg {

std::optional<std::string> read_env(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

}  // namespace sg
