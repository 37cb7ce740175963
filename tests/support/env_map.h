// env_map.h: a fake environment for the resolve_arms() tests (tests/cpu/test_arms.cpp and
// tests/cpu/test_seed_flags.cpp): an Env map, the EnvLookup that reads it, resolve() and src()
// shorthands over it, and contains() for checking parts of messages. Header-only.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/arms.h"

namespace sg::test {

using Env = std::map<std::string, std::string>;

inline EnvLookup lookup(const Env& env) {
  return [env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

inline ResolvedArms resolve(const Env& env, const std::vector<std::string>& cli = {}) {
  return resolve_arms(cli, lookup(env));
}

inline const std::string& src(const ResolvedArms& r, Op op) { return r.source[static_cast<size_t>(op)]; }

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace sg::test
