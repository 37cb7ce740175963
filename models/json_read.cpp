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

// A first pass over the text with nlohmann's SAX interface (no DOM): it counts the nesting and
// keeps each open object's keys, and stops at the first violation or syntax error. The DOM is then
// parsed without a callback. (nlohmann's callback parser, used before, scans the parent container
// for discarded values each time an object or array ends, which made a container holding n objects
// take time quadratic in n: 40,000 objects took 17 s.) Linear time and memory in the text.
class Checker {
 public:
  explicit Checker(int max_depth) : max_depth_(max_depth) {}

  enum class Failure { none, too_deep, duplicate, syntax };
  Failure failure = Failure::none;
  std::vector<std::string> duplicate_path;  // the keys leading to the repeated key, then that key
  std::string syntax_message;

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(nlohmann::json::number_integer_t) { return true; }
  bool number_unsigned(nlohmann::json::number_unsigned_t) { return true; }
  bool number_float(nlohmann::json::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(nlohmann::json::binary_t&) { return true; }
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      for (size_t i = 0; i + 1 < frames_.size(); ++i) {
        if (frames_[i].object) duplicate_path.push_back(printable(frames_[i].key));
      }
      duplicate_path.push_back(printable(k));
      failure = Failure::duplicate;
      return false;
    }
    f.key = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) {
    // nlohmann's message without its "[json.exception.parse_error.101] " prefix.
    std::string_view m = e.what();
    if (const size_t cut = m.find("] "); m.rfind("[json.exception.", 0) == 0 && cut != std::string_view::npos) {
      m.remove_prefix(cut + 2);
    }
    syntax_message = std::string(m);
    failure = Failure::syntax;
    return false;
  }

 private:
  struct Frame {
    bool object = false;
    std::unordered_set<std::string> keys;  // objects: the keys seen so far
    std::string key;                       // objects: the current key
  };
  bool open(bool object) {
    if (static_cast<int>(frames_.size()) >= max_depth_) {
      failure = Failure::too_deep;
      return false;
    }
    frames_.push_back(Frame{object, {}, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  int max_depth_;
  std::vector<Frame> frames_;
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
  // The parser takes a NUL byte for the end of its input and would ignore whatever follows it.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw Error(fmt::format("{}: the {} is not valid JSON: a NUL byte at byte {}", origin, options.what, nul));
  }
  Checker check(options.max_depth);
  if (!json::sax_parse(text.begin(), text.end(), &check) || check.failure != Checker::Failure::none) {
    switch (check.failure) {
      case Checker::Failure::too_deep:
        throw Error(fmt::format("{}: the {} nests deeper than {} levels", origin, options.what, options.max_depth));
      case Checker::Failure::duplicate: {
        std::string name;
        if (options.name_key) {
          name = options.name_key(check.duplicate_path);
        } else {
          std::string joined;
          for (const auto& k : check.duplicate_path) joined += (joined.empty() ? "" : ".") + k;
          name = fmt::format("key '{}'", joined);
        }
        throw Error(fmt::format("{}: {} appears twice in one object of the {} (keys must be unique)", origin, name,
                                options.what));
      }
      case Checker::Failure::syntax:
      case Checker::Failure::none:
        throw Error(
            fmt::format("{}: the {} is not valid JSON: {}", origin, options.what,
                        printable(check.syntax_message.empty() ? "the parser stopped" : check.syntax_message, 300)));
    }
  }
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // not expected after the first pass accepted the text
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
