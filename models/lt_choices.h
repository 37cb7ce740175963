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

#include <nlohmann/json.hpp>

namespace sg {

inline constexpr const char* kLtChoicesFormat = "stepgraph-lt-choices 1";

// Every choice of CUDA device `device` (named `device_name`) as the file's JSON.
nlohmann::json lt_choices_json(int device, const std::string& device_name);

// Adds the choices of `j` for `device` (a shape with a choice in this process keeps it); returns
// how many were added. Throws sg::Error, starting with `origin`, for a malformed document (a
// missing or mistyped field, a bad dtype, hex digits that are not 128, a size or alignment out
// of range, ldx < K or ldy < N), or one written for another cuBLASLt version or device model.
// Nothing is added when it throws.
size_t add_lt_choices(const nlohmann::json& j, const std::string& origin, int device, const std::string& device_name);

// read_json_file(path) (a regular file, bounded size and depth), then add_lt_choices.
size_t load_lt_choices(const std::filesystem::path& path, int device, const std::string& device_name);

}  // namespace sg
