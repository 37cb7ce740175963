// fuzz_cli_tokens: `generate --tokens` (parse_token_list in tools/cli/cli_checks.h). sg::Error is
// the expected outcome of a bad list; an accepted list holds non-negative ids, one per comma-
// separated entry, and formatting it back gives the same ids.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/error.h"
#include "tests/fuzz/fuzz_support.h"
#include "tools/cli/cli_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<int64_t> ids = sg::cli::parse_token_list(text);
    FUZZ_CHECK(!ids.empty(), "empty list accepted");
    size_t commas = 0;
    for (char c : text) commas += c == ',';
    FUZZ_CHECK(ids.size() == commas + 1, "%zu ids from %zu commas", ids.size(), commas);
    std::string back;
    for (int64_t v : ids) {
      FUZZ_CHECK(v >= 0, "negative id accepted");
      back += (back.empty() ? "" : ",") + std::to_string(v);
    }
    FUZZ_CHECK(sg::cli::parse_token_list(back) == ids, "reformatted list parses differently");
    try {
      sg::cli::check_token_range(ids, 1000, "fuzz");
      for (int64_t v : ids) FUZZ_CHECK(v < 1000, "id outside the vocabulary accepted");
    } catch (const sg::Error& e) {
      FUZZ_CHECK(printable_message(e.what()), "unprintable message");
    }
  } catch (const sg::Error& e) {
    FUZZ_CHECK(printable_message(e.what()), "unprintable or oversized message (%zu bytes)",
               std::string(e.what()).size());
  }
  return 0;
}
