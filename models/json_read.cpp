// json_read.cpp: parse_json with its depth and duplicate-key checks, read_json_file and
// json_excerpt (see json_read.h).
#include "models/json_read.h"

#include <fmt/format.h>

#include <unordered_set>

#include "engine/error.h"
#include "engine/text.h"

namespace sg {
namespace {

using nlohmann::json;

struct TooDeep {};
struct DuplicateKey {
  std::vector<std::string> path;
};

struct Frame {
  bool object = false;
  std::unordered_set<std::string> keys;  // objects: the keys seen so far
  std::string key;                       // objects: the current key
};

void excerpt(const json& v, std::string& out, size_t max_chars, int depth) {
  if (out.size() > max_chars) return;
  constexpr int kShownDepth = 4;
  switch (v.type()) {
    case json::value_t::object: {
      if (depth >= kShownDepth) {
        out += "{...}";
        return;
      }
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (out.size() > max_chars) return;
        if (!first) out += ',';
        first = false;
        out += '"' + printable(it.key(), max_chars) + "\":";
        excerpt(it.value(), out, max_chars, depth + 1);
      }
      out += '}';
      return;
    }
    case json::value_t::array: {
      if (depth >= kShownDepth) {
        out += "[...]";
        return;
      }
      out += '[';
      bool first = true;
      for (const json& e : v) {
        if (out.size() > max_chars) return;
        if (!first) out += ',';
        first = false;
        excerpt(e, out, max_chars, depth + 1);
      }
      out += ']';
      return;
    }
    case json::value_t::string: out += '"' + printable(v.get_ref<const std::string&>(), max_chars) + '"'; return;
    case json::value_t::binary: out += "<binary>"; return;
    case json::value_t::discarded: out += "<discarded>"; return;
    default: out += v.dump(); return;  // null, booleans and numbers: short
  }
}

}  // namespace

json parse_json(std::string_view text, const std::string& origin, const JsonReadOptions& options) {
  std::vector<Frame> frames;
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames.push_back(Frame{event == json::parse_event_t::object_start, {}, {}});
        if (static_cast<int>(frames.size()) > options.max_depth) throw TooDeep{};
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case json::parse_event_t::key: {
        if (frames.empty() || !parsed.is_string()) break;
        Frame& f = frames.back();
        std::string key = parsed.get<std::string>();
        if (!f.keys.insert(key).second) {
          DuplicateKey d;
          for (size_t i = 0; i + 1 < frames.size(); ++i) {
            if (frames[i].object) d.path.push_back(printable(frames[i].key));
          }
          d.path.push_back(printable(key));
          throw d;
        }
        f.key = std::move(key);
        break;
      }
      case json::parse_event_t::value: break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const TooDeep&) {
    throw Error(fmt::format("{}: the {} nests deeper than {} levels", origin, options.what, options.max_depth));
  } catch (const DuplicateKey& d) {
    std::string name;
    if (options.name_key) {
      name = options.name_key(d.path);
    } else {
      std::string joined;
      for (const auto& k : d.path) joined += (joined.empty() ? "" : ".") + k;
      name = fmt::format("key '{}'", joined);
    }
    throw Error(
        fmt::format("{}: {} appears twice in one object of the {} (keys must be unique)", origin, name, options.what));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: the {} is not valid JSON: {}", origin, options.what, printable(e.what(), 300)));
  }
}

json read_json_file(const std::filesystem::path& path, const JsonReadOptions& options, size_t max_bytes) {
  const std::string text = read_regular_file(path, max_bytes);
  return parse_json(text, printable(path.string(), 4096), options);
}

std::string json_excerpt(const json& v, size_t max_chars) {
  std::string out;
  excerpt(v, out, max_chars, 0);
  if (out.size() > max_chars) out = out.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return out;
}

}  // namespace sg
