// json_read.h: every JSON stepgraph reads from a file (config.json, model.safetensors.index.json,
// the safetensors header) goes through parse_json(), which refuses what nlohmann::json would accept
// but cannot be handled safely or unambiguously:
//   - nesting deeper than a limit (64 for files, 8 for a safetensors header), checked while parsing,
//     so a value nested 100,000 levels deep is an error, never a stack overflow in a later step;
//   - a key given twice in one object (nlohmann::json, like Python, would silently keep the last);
//   - invalid JSON, with nlohmann's message made printable (it may quote bytes from the file), and
//     any NUL byte (nlohmann takes it for the end of the input and ignores what follows).
// read_json_file() adds the file checks of engine/files.h: a regular file of at most 64 MiB.
// json_excerpt() shows a parsed value in an error message without ever formatting all of it.
// Every error is an sg::Error that starts with `origin` (the file's path).
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/files.h"

namespace sg {

inline constexpr int kMaxJsonDepth = 64;

struct JsonReadOptions {
  int max_depth = kMaxJsonDepth;  // arrays and objects, the outermost counting 1
  std::string what = "file";      // how the text is named in errors: "file", "header"
  // Names a key that appears twice, given the keys leading to it (outermost first; the last is the
  // repeated key, already made printable). Default: "key 'a.b.c'".
  std::function<std::string(const std::vector<std::string>& path)> name_key;
};

nlohmann::json parse_json(std::string_view text, const std::string& origin, const JsonReadOptions& options = {});

// read_regular_file(path, max_bytes), then parse_json with origin = the path (printable).
nlohmann::json read_json_file(const std::filesystem::path& path, const JsonReadOptions& options = {},
                              size_t max_bytes = kMaxJsonFileBytes);

// At most about max_chars characters of `v` as compact JSON, strings made printable, cut with
// "..." (a container is walked only as far as the excerpt reaches).
std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 60);

}  // namespace sg
