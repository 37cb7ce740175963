// serve_trace.cpp: synthetic traces, the presets, the JSON Lines reader and the prompts' ids (see
// serve_trace.h).
#include "models/serve_trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/files.h"
#include "engine/text.h"
#include "models/json_read.h"

namespace sg {
namespace {

using nlohmann::json;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [lo, hi] (inclusive), hi - lo small.
int uniform_int(uint64_t& state, int lo, int hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int>(splitmix64(state) % span);
}

// Uniform in (0, 1]: never 0, so log() is finite.
double uniform_open(uint64_t& state) { return (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53; }

// One line's fields; every error names origin, line and field.
class LineReader {
 public:
  LineReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(fmt::format("{}: field '{}': {}", where_, field, what));
  }
  const json* find(const char* field) const {
    auto it = obj_.find(field);
    return it == obj_.end() ? nullptr : &*it;
  }
  // An integer in [lo, hi]; a float (1.0, 1e3) is refused: lengths and ids are integers. An integer
  // past 64 bits reaches here as a float (99999999999999999999 as 1e+20): refused for its size.
  int integer(const std::string& field, const json& v, int64_t lo, int64_t hi) const {
    if (v.is_number_float() && std::fabs(v.get<double>()) >= 0x1p63 && std::isfinite(v.get<double>())) {
      fail(field, v.get<double>() < 0 ? fmt::format("{} is negative (must be >= {})", json_excerpt(v), lo)
                                      : fmt::format("{} is larger than {}", json_excerpt(v), hi));
    }
    if (!v.is_number_integer()) fail(field, fmt::format("must be an integer, got {}", json_excerpt(v)));
    const bool big = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
    const int64_t x = big ? hi : v.get<int64_t>();
    if (big || x > hi) fail(field, fmt::format("{} is larger than {}", json_excerpt(v), hi));
    if (x < lo) fail(field, fmt::format("{} is {} (must be >= {})", x, x < 0 ? "negative" : "too small", lo));
    return static_cast<int>(x);
  }

 private:
  const json& obj_;
  std::string where_;
};

ServeRequest parse_line(const json& obj, const std::string& where, int line) {
  if (!obj.is_object()) {
    throw Error(fmt::format("{}: expected one JSON object per line (with max_new and prompt or prompt_len), got {}",
                            where, json_excerpt(obj)));
  }
  static const char* const known[] = {"prompt", "prompt_len", "max_new", "arrival_ms"};
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) {
      throw Error(
          fmt::format("{}: unknown field '{}' (known: {})", where, printable(it.key(), 60), fmt::join(known, ", ")));
    }
  }
  const LineReader r(obj, where);
  ServeRequest q;
  q.line = line;
  const json* prompt = r.find("prompt");
  const json* len = r.find("prompt_len");
  if (prompt && len) r.fail("prompt_len", "given together with 'prompt' (give one of them)");
  if (!prompt && !len) r.fail("prompt", "missing (give 'prompt': [token ids] or 'prompt_len': n)");
  if (prompt) {
    if (!prompt->is_array())
      r.fail("prompt", fmt::format("must be an array of token ids, got {}", json_excerpt(*prompt)));
    if (prompt->empty()) r.fail("prompt", "is empty (a request needs at least one prompt token)");
    if (prompt->size() > static_cast<size_t>(kMaxTraceTokens)) {
      r.fail("prompt", fmt::format("has {} tokens, more than {}", prompt->size(), kMaxTraceTokens));
    }
    for (size_t i = 0; i < prompt->size(); ++i) {
      q.prompt.push_back(r.integer(fmt::format("prompt[{}]", i), (*prompt)[i], 0, std::numeric_limits<int32_t>::max()));
    }
    q.prompt_len = static_cast<int>(q.prompt.size());
  } else {
    q.prompt_len = r.integer("prompt_len", *len, 1, kMaxTraceTokens);
  }
  const json* max_new = r.find("max_new");
  if (!max_new) r.fail("max_new", "missing (the number of tokens to generate, >= 1)");
  q.max_new = r.integer("max_new", *max_new, 1, kMaxTraceTokens);
  if (const json* a = r.find("arrival_ms")) {
    if (!a->is_number())
      r.fail("arrival_ms", fmt::format("must be a number of milliseconds, got {}", json_excerpt(*a)));
    q.arrival_ms = a->get<double>();
    if (q.arrival_ms < 0) r.fail("arrival_ms", fmt::format("{} is negative (must be >= 0)", json_excerpt(*a)));
    if (!(q.arrival_ms <= kMaxTraceArrivalMs)) {  // NaN and infinity included
      r.fail("arrival_ms",
             fmt::format("{} is later than a day ({} ms; the run waits for each arrival on the wall clock)",
                         json_excerpt(*a), kMaxTraceArrivalMs));
    }
  }
  return q;
}

}  // namespace

std::vector<ServeRequest> synthetic_trace(const SyntheticTraceOptions& o) {
  require(o.requests >= 1 && o.requests <= kMaxTraceRequests, "synthetic trace: requests {} outside [1, {}]",
          o.requests, kMaxTraceRequests);
  require(o.prompt_min >= 1 && o.prompt_min <= o.prompt_max && o.prompt_max <= kMaxTraceTokens,
          "synthetic trace: prompt lengths [{}, {}] invalid", o.prompt_min, o.prompt_max);
  require(o.new_min >= 1 && o.new_min <= o.new_max && o.new_max <= kMaxTraceTokens,
          "synthetic trace: output lengths [{}, {}] invalid", o.new_min, o.new_max);
  require(o.mean_gap_ms >= 0 && std::isfinite(o.mean_gap_ms), "synthetic trace: mean gap {} invalid", o.mean_gap_ms);
  uint64_t state = o.seed ^ 0x7365727665ull;  // "serve"
  std::vector<ServeRequest> out;
  double t = 0;
  for (int i = 0; i < o.requests; ++i) {
    ServeRequest q;
    q.prompt_len = uniform_int(state, o.prompt_min, o.prompt_max);
    q.max_new = uniform_int(state, o.new_min, o.new_max);
    if (o.mean_gap_ms > 0 && i > 0) t += -std::log(uniform_open(state)) * o.mean_gap_ms;
    q.arrival_ms = t;
    out.push_back(std::move(q));
  }
  return out;
}

std::vector<std::string> trace_preset_names() { return {"serve-c32", "mixed"}; }

SyntheticTraceOptions trace_preset(const std::string& name, int requests, uint64_t seed) {
  SyntheticTraceOptions o;
  o.seed = seed;
  if (name == "serve-c32") {
    o.requests = 32;
  } else if (name == "mixed") {
    o.requests = 64;
    o.prompt_min = 16;
    o.prompt_max = 2048;
    o.new_min = 8;
    o.new_max = 256;
    o.mean_gap_ms = 20;
  } else {
    throw Error(
        fmt::format("unknown trace preset '{}' (valid: {})", printable(name), fmt::join(trace_preset_names(), ", ")));
  }
  if (requests > 0) o.requests = requests;
  return o;
}

std::vector<ServeRequest> parse_trace_jsonl(std::string_view text, const std::string& origin) {
  std::vector<ServeRequest> out;
  JsonReadOptions jo;
  jo.max_depth = 2;  // an object holding the prompt's array
  jo.what = "line";
  int line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view s = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (s.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{}:{}", origin, line);
    if (out.size() >= static_cast<size_t>(kMaxTraceRequests)) {
      throw Error(fmt::format("{}: more than {} requests in the trace", where, kMaxTraceRequests));
    }
    out.push_back(parse_line(parse_json(s, where, jo), where, line));
  }
  if (out.empty()) throw Error(fmt::format("{}: the trace holds no request", origin));
  return out;
}

std::vector<ServeRequest> read_trace_jsonl(const std::filesystem::path& path) {
  return parse_trace_jsonl(read_regular_file(path), printable(path.string(), 4096));
}

void prepare_prompts(std::vector<ServeRequest>& requests, int vocab, uint64_t seed) {
  require(vocab >= 1, "prepare_prompts: vocab {} < 1", vocab);
  for (size_t i = 0; i < requests.size(); ++i) {
    ServeRequest& q = requests[i];
    const std::string who = q.line > 0 ? fmt::format("request {} (line {})", i, q.line) : fmt::format("request {}", i);
    if (q.prompt.empty()) {
      q.prompt_vocab = vocab;
      q.prompt_stream = seed * 0xD1B54A32D192ED03ull + i;
      continue;
    }
    q.prompt_vocab = 0;
    if (static_cast<int>(q.prompt.size()) != q.prompt_len) {
      throw Error(fmt::format("{}: prompt_len {} but {} prompt tokens", who, q.prompt_len, q.prompt.size()));
    }
    for (size_t t = 0; t < q.prompt.size(); ++t) {
      if (q.prompt[t] < 0 || q.prompt[t] >= vocab) {
        throw Error(fmt::format("{}: prompt[{}] = {} is outside the vocabulary [0, {})", who, t, q.prompt[t], vocab));
      }
    }
  }
}

std::vector<int32_t> prompt_tokens(const ServeRequest& q) {
  if (q.prompt_vocab == 0) {
    require(q.prompt.size() == static_cast<size_t>(std::max(q.prompt_len, 0)),
            "prompt_tokens: prompt_len {} but {} prompt tokens (prepare_prompts first)", q.prompt_len, q.prompt.size());
    return q.prompt;
  }
  std::vector<int32_t> ids(static_cast<size_t>(std::max(q.prompt_len, 0)));
  uint64_t state = q.prompt_stream;
  for (auto& t : ids) t = static_cast<int32_t>(splitmix64(state) % static_cast<uint64_t>(q.prompt_vocab));
  return ids;
}

uint64_t token_hash(std::span<const int32_t> tokens, uint64_t h) {
  for (int32_t t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

}  // namespace sg
