// text.h: showing text that stepgraph did not write itself (names and values read from files, the
// environment or the command line) in error messages and on the terminal. Such text may hold
// control characters, terminal escape sequences or megabytes of data; printable() makes it one
// short line that cannot drive the terminal.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace sg {

// `s` with every byte below 0x20, 0x7f and every byte >= 0x80 written as \xNN and a backslash as
// \\ (so the result is plain ASCII and unambiguous); when `s` is longer than max_bytes, only its
// first max_bytes bytes are shown, followed by "... (N bytes)". For example "a\x1b[2Jb" -> "a\x1b[2Jb"
// (the ESC byte shown as the four characters \x1b).
std::string printable(std::string_view s, size_t max_bytes = 200);

// "1 slot", "2 slots", "0 slots": the count and the noun, with an "s" unless the count is 1.
std::string count_of(long long n, std::string_view noun);

}  // namespace sg
