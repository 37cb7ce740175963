// env.h: the one place stepgraph reads the process environment. Everything else receives values
// (an EnvLookup) from here, once, before any step runs; kernels and steps never read it.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace sg {

// The value of an environment variable; nullopt when unset ("" when set to the empty string).
std::optional<std::string> read_env(std::string_view name);

}  // namespace sg
