// env.h: the one place stepgraph reads the process environment. Everything else receives values
// (an EnvLookup) from here, once, before any step runs; kernels and steps never read it.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sg {

// The value of an environment variable; nullopt when unset ("" when set to the empty string).
std::optional<std::string> read_env(std::string_view name);

// The names of the set environment variables that start with `prefix`, sorted.
std::vector<std::string> env_names_with_prefix(std::string_view prefix);

}  // namespace sg
