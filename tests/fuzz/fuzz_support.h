// fuzz_support.h: what every libFuzzer target in tests/fuzz shares. An expected outcome (an error
// the API documents) returns normally; a broken promise calls fuzz_fail, which prints what was
// wrong and aborts, so libFuzzer records the input as a crash.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond, ...)                                                                 \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz invariant broken: %s (%s:%d): ", #cond, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                                      \
      std::fprintf(stderr, "\n");                                                             \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

// The messages stepgraph shows are printable: no control byte (other than newline or tab), no byte
// >= 0x80 (engine/text.h escapes them) and bounded in size (RELIABILITY.md: under 3,000 bytes).
inline bool printable_message(const std::string& m) {
  if (m.size() > 3000) return false;
  for (unsigned char c : m) {
    if ((c < 0x20 && c != '\n' && c != '\t') || c >= 0x7f) return false;
  }
  return true;
}
