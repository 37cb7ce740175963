// lt_choices.cpp: the cuBLASLt choices file (lt_choices.h).
#include "models/lt_choices.h"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "engine/error.h"
#include "engine/gemm_lt.h"
#include "engine/tensor.h"
#include "engine/text.h"
#include "models/json_read.h"

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

// Field `key` of object `o` (the i-th choice, for messages) as T; throws naming both.
template <typename T>
T field(const nlohmann::json& o, const char* key, const std::string& where) {
  const auto it = o.find(key);
  require(it != o.end(), "{}: no \"{}\"", where, key);
  if constexpr (std::is_same_v<T, std::string>) {
    require(it->is_string(), "{}: \"{}\" must be a string, not {}", where, key, json_excerpt(*it));
    return it->template get<std::string>();
  } else {
    require(it->is_number_integer() || it->is_number_unsigned(), "{}: \"{}\" must be an integer, not {}", where, key,
            json_excerpt(*it));
    return it->template get<T>();
  }
}

LtChoiceRecord parse_choice(const nlohmann::json& c, const std::string& where) {
  require(c.is_object(), "{}: must be an object, not {}", where, json_excerpt(c));
  LtChoiceRecord r;
  LtShape& s = r.shape;
  s.M = field<int64_t>(c, "M", where);
  s.N = field<int64_t>(c, "N", where);
  s.K = field<int64_t>(c, "K", where);
  s.ldx = field<int64_t>(c, "ldx", where);
  s.ldy = field<int64_t>(c, "ldy", where);
  require(s.M > 0 && s.N > 0 && s.K > 0 && s.ldx >= s.K && s.ldy >= s.N,
          "{}: a shape needs M, N, K > 0, ldx >= K and ldy >= N (M={} N={} K={} ldx={} ldy={})", where, s.M, s.N, s.K,
          s.ldx, s.ldy);
  try {
    s.in = parse_dtype(field<std::string>(c, "in", where));
    s.out = parse_dtype(field<std::string>(c, "out", where));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  s.align_x = field<int>(c, "align_x", where);
  s.align_w = field<int>(c, "align_w", where);
  s.align_y = field<int>(c, "align_y", where);
  for (int a : {s.align_x, s.align_w, s.align_y})
    require(a >= 1 && a <= 256 && (a & (a - 1)) == 0, "{}: an alignment must be a power of two up to 256, not {}",
            where, a);
  r.workspace_bytes = field<size_t>(c, "workspace", where);
  const std::string hex = field<std::string>(c, "algo", where);
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
  r.text = printable(field<std::string>(c, "text", where), 200);
  return r;
}

}  // namespace

nlohmann::json lt_choices_json(int device, const std::string& device_name) {
  nlohmann::json list = nlohmann::json::array();
  for (const LtChoiceRecord& r : lt_choices(device)) {
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
          {"cublaslt_version", lt_library_version()},
          {"device", device_name},
          {"choices", std::move(list)}};
}

size_t add_lt_choices(const nlohmann::json& j, const std::string& origin, int device, const std::string& device_name) {
  require(j.is_object(), "{}: a cuBLASLt choices file must hold a JSON object, not {}", origin, json_excerpt(j));
  const std::string format = field<std::string>(j, "format", origin);
  require(format == kLtChoicesFormat, "{}: not a cuBLASLt choices file (format '{}', expected '{}')", origin,
          printable(format, 80), kLtChoicesFormat);
  const auto version = field<size_t>(j, "cublaslt_version", origin);
  require(version == lt_library_version(),
          "{}: written with cuBLASLt {}, but this build runs cuBLASLt {}; an algorithm's bytes are only valid for "
          "the version that chose them (delete the file, or give another, to time the shapes again)",
          origin, version, lt_library_version());
  const std::string dev = field<std::string>(j, "device", origin);
  require(dev == device_name,
          "{}: written on a {}, but this device is a {}; choices timed on one device model do not carry over "
          "(delete the file, or give another, to time the shapes again)",
          origin, printable(dev, 80), printable(device_name, 80));
  const auto it = j.find("choices");
  require(it != j.end() && it->is_array(), "{}: \"choices\" must be an array", origin);
  std::vector<LtChoiceRecord> records;
  for (size_t i = 0; i < it->size(); ++i)
    records.push_back(parse_choice((*it)[i], fmt::format("{}: choice {}", origin, i)));
  size_t added = 0;
  for (const LtChoiceRecord& r : records) added += lt_add_choice(device, r) ? 1 : 0;
  return added;
}

size_t load_lt_choices(const std::filesystem::path& path, int device, const std::string& device_name) {
  return add_lt_choices(read_json_file(path), printable(path.string(), 4096), device, device_name);
}

}  // namespace sg
