// text.cpp: printable() (see text.h).
#include "engine/text.h"

#include <fmt/format.h>

namespace sg {

std::string printable(std::string_view s, size_t max_bytes) {
  const size_t shown = s.size() > max_bytes ? max_bytes : s.size();
  std::string out;
  out.reserve(shown + 16);
  for (size_t i = 0; i < shown; ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch < 0x20 || ch >= 0x7f) {
      out += fmt::format("\\x{:02x}", ch);
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (shown < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string count_of(long long n, std::string_view noun) {
  std::string out = std::to_string(n);
  out += ' ';
  out += noun;
  if (n != 1) out += 's';
  return out;
}

}  // namespace sg
