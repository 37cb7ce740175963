// lt_choices.h: the cuBLASLt choices of the `lt`, `lt-all` and `mixed` GEMM settings
// (engine/gemm_lt.h) kept in a JSON file. Each process times its cuBLASLt candidates per shape and
// may settle on another algorithm than the last run did (near ties, another machine), which moves
// node times and bytes between two runs that should differ only in what is being compared. With
// a choices file, the second run takes the first one's algorithms and times none of them.
//
// The file: {"format": "stepgraph-lt-choices 1", "cublaslt_version": 130000, "device": "NVIDIA
// H200", "choices": [{"M", "N", "K", "ldx", "ldy", "in", "out", "align_x", "align_w", "align_y",
// "workspace", "algo" (the algorithm's 64 bytes as 128 hex digits), "text"}, ...]}. cuBLASLt
// allows an algorithm's bytes to be reused with the same library version only, so a file of
// another version, or of another device model, is refused with an error that says so.
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/gemm_lt.h"
#include "engine/text.h"
#include "models/json_read.h"

namespace sg {

inline constexpr const char* kLtChoicesFormat = "stepgraph-lt-choices 1";

// The file's JSON for `records` (pure: tests and the fuzz target call it without a device).
nlohmann::json lt_choices_document(const std::vector<LtChoiceRecord>& records, size_t cublaslt_version,
                                   const std::string& device_name);

// The choices of document `j`, checked against the running library's `cublaslt_version` and
// `device_name`. Throws sg::Error, starting with `origin`, for a malformed document (a missing or
// mistyped field, a bad dtype, hex digits that are not 128, a size or alignment out of range,
// ldx < K or ldy < N), or one written for another cuBLASLt version or device model. Pure.
std::vector<LtChoiceRecord> parse_lt_choices(const nlohmann::json& j, const std::string& origin,
                                             size_t cublaslt_version, const std::string& device_name);

// Every choice of CUDA device `device` (named `device_name`) as the file's JSON.
inline nlohmann::json lt_choices_json(int device, const std::string& device_name) {
  return lt_choices_document(lt_choices(device), lt_library_version(), device_name);
}

// Adds the choices of `j` (parse_lt_choices with this library's version) for `device`; a shape
// with a choice in this process keeps it. Returns how many were added; nothing is added when it
// throws.
inline size_t add_lt_choices(const nlohmann::json& j, const std::string& origin, int device,
                             const std::string& device_name) {
  size_t added = 0;
  for (const LtChoiceRecord& r : parse_lt_choices(j, origin, lt_library_version(), device_name))
    added += lt_add_choice(device, r) ? 1 : 0;
  return added;
}

// read_json_file(path) (a regular file, bounded size and depth), then add_lt_choices.
inline size_t load_lt_choices(const std::filesystem::path& path, int device, const std::string& device_name) {
  return add_lt_choices(read_json_file(path), printable(path.string(), 4096), device, device_name);
}

}  // namespace sg
