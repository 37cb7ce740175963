// lt_choices.cpp: the cuBLASLt choices file (lt_choices.h).
#include "models/lt_choices.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "engine/text.h"

namespace sg {
namespace {

std::string to_hex(const std::array<uint64_t, 8>& a) {
  std::string s;
  for (uint64_t w : a) s += fmt::format("{:016x}", w);
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Field `key` of object `o` (`where` names it in messages): a string, or an integer in [lo, hi].
std::string text_field(const nlohmann::json& o, const char* key, const std::string& where) {
  const auto it = o.find(key);
  require(it != o.end(), "{}: no \"{}\"", where, key);
  require(it->is_string(), "{}: \"{}\" must be a string, not {}", where, key, json_excerpt(*it));
  return it->get<std::string>();
}

int64_t int_field(const nlohmann::json& o, const char* key, const std::string& where, int64_t lo, int64_t hi) {
  const auto it = o.find(key);
  require(it != o.end(), "{}: no \"{}\"", where, key);
  require(it->is_number_integer(), "{}: \"{}\" must be an integer, not {}", where, key, json_excerpt(*it));
  bool fits = true;
  int64_t v = 0;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    fits = u <= static_cast<uint64_t>(hi);
    v = static_cast<int64_t>(u);
  } else {
    v = it->get<int64_t>();
  }
  require(fits && v >= lo && v <= hi, "{}: \"{}\" must be in [{}, {}], not {}", where, key, lo, hi, json_excerpt(*it));
  return v;
}

LtChoiceRecord parse_choice(const nlohmann::json& c, const std::string& where) {
  require(c.is_object(), "{}: must be an object, not {}", where, json_excerpt(c));
  LtChoiceRecord r;
  LtShape& s = r.shape;
  constexpr int64_t kMaxDim = int64_t{1} << 40;
  s.M = int_field(c, "M", where, 1, kMaxDim);
  s.N = int_field(c, "N", where, 1, kMaxDim);
  s.K = int_field(c, "K", where, 1, kMaxDim);
  s.ldx = int_field(c, "ldx", where, s.K, kMaxDim);
  s.ldy = int_field(c, "ldy", where, s.N, kMaxDim);
  try {
    s.in = parse_dtype(text_field(c, "in", where));
    s.out = parse_dtype(text_field(c, "out", where));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  s.align_x = static_cast<int>(int_field(c, "align_x", where, 1, 256));
  s.align_w = static_cast<int>(int_field(c, "align_w", where, 1, 256));
  s.align_y = static_cast<int>(int_field(c, "align_y", where, 1, 256));
  for (int a : {s.align_x, s.align_w, s.align_y})
    require((a & (a - 1)) == 0, "{}: an alignment must be a power of two up to 256, not {}", where, a);
  r.workspace_bytes = static_cast<size_t>(int_field(c, "workspace", where, 0, int64_t{1} << 48));
  const std::string hex = text_field(c, "algo", where);
  require(hex.size() == 128, "{}: \"algo\" must be 128 hex digits (64 bytes), not {} characters", where, hex.size());
  for (size_t w = 0; w < 8; ++w) {
    uint64_t v = 0;
    for (size_t i = 0; i < 16; ++i) {
      const int d = hex_digit(hex[16 * w + i]);
      require(d >= 0, "{}: \"algo\" holds a character that is not a hex digit: '{}'", where,
              printable(std::string(1, hex[16 * w + i])));
      v = (v << 4) | static_cast<uint64_t>(d);
    }
    r.algo[w] = v;
  }
  // The text becomes the GEMM nodes' arm in manifests and tables: printable ASCII only, refused
  // otherwise (escaping it here would change it at every round trip through a file).
  r.text = text_field(c, "text", where);
  require(r.text.size() <= 200 &&
              std::all_of(r.text.begin(), r.text.end(), [](char ch) { return ch >= 0x20 && ch < 0x7f; }),
          "{}: \"text\" must be printable ASCII of at most 200 characters, not {}", where, json_excerpt(c.at("text")));
  return r;
}

}  // namespace

nlohmann::json lt_choices_document(const std::vector<LtChoiceRecord>& records, size_t cublaslt_version,
                                   const std::string& device_name) {
  nlohmann::json list = nlohmann::json::array();
  for (const LtChoiceRecord& r : records) {
    const LtShape& s = r.shape;
    list.push_back({{"M", s.M},
                    {"N", s.N},
                    {"K", s.K},
                    {"ldx", s.ldx},
                    {"ldy", s.ldy},
                    {"in", dtype_name(s.in)},
                    {"out", dtype_name(s.out)},
                    {"align_x", s.align_x},
                    {"align_w", s.align_w},
                    {"align_y", s.align_y},
                    {"workspace", r.workspace_bytes},
                    {"algo", to_hex(r.algo)},
                    {"text", r.text}});
  }
  return {{"format", kLtChoicesFormat},
          {"cublaslt_version", cublaslt_version},
          {"device", device_name},
          {"choices", std::move(list)}};
}

std::vector<LtChoiceRecord> parse_lt_choices(const nlohmann::json& j, const std::string& origin,
                                             size_t cublaslt_version, const std::string& device_name) {
  require(j.is_object(), "{}: a cuBLASLt choices file must hold a JSON object, not {}", origin, json_excerpt(j));
  const std::string format = text_field(j, "format", origin);
  require(format == kLtChoicesFormat, "{}: not a cuBLASLt choices file (format '{}', expected '{}')", origin,
          printable(format, 80), kLtChoicesFormat);
  const auto version = static_cast<size_t>(int_field(j, "cublaslt_version", origin, 0, INT64_MAX));
  require(version == cublaslt_version,
          "{}: written with cuBLASLt {}, but this build runs cuBLASLt {}; an algorithm's bytes are only valid for "
          "the version that chose them (delete the file, or give another, to time the shapes again)",
          origin, version, cublaslt_version);
  const std::string dev = text_field(j, "device", origin);
  require(dev == device_name,
          "{}: written on a {}, but this device is a {}; choices timed on one device model do not carry over "
          "(delete the file, or give another, to time the shapes again)",
          origin, printable(dev, 80), printable(device_name, 80));
  const auto it = j.find("choices");
  require(it != j.end() && it->is_array(), "{}: \"choices\" must be an array", origin);
  std::vector<LtChoiceRecord> records;
  for (size_t i = 0; i < it->size(); ++i)
    records.push_back(parse_choice((*it)[i], fmt::format("{}: choice {}", origin, i)));
  return records;
}

}  // namespace sg
