// fuzz_cli_tokens: `generate --tokens` (parse_token_list in tools/cli/cli_checks.h) and, on the same
// input, `--fault-after` (parse_fault_after). sg::Error is the expected outcome of a bad value; an
// accepted token list holds non-negative ids, one per comma-separated entry, and formatting it back
// gives the same ids; an accepted drill has a layer >= -1, an op without ':', '@' or blanks and a
// run >= 1, and formatting it back as LAYER:OP@RUN gives the same drill.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/error.h"
#include "tests/fuzz/fuzz_support.h"
#include "tools/cli/cli_checks.h"

namespace {

void fuzz_fault_after(const std::string& text) {
  try {
    const sg::cli::FaultDrill d = sg::cli::parse_fault_after(text);
    FUZZ_CHECK(d.on() == !text.empty(), "a non-empty value gave no drill, or an empty one a drill");
    if (!d.on()) return;
    FUZZ_CHECK(d.layer >= -1, "layer %d accepted", d.layer);
    FUZZ_CHECK(d.run >= 1, "run 0 accepted");
    FUZZ_CHECK(d.op.find_first_of(" \t:@") == std::string::npos, "op with ':', '@' or a blank accepted");
    const sg::cli::FaultDrill back =
        sg::cli::parse_fault_after(std::to_string(d.layer) + ":" + d.op + "@" + std::to_string(d.run));
    FUZZ_CHECK(back.layer == d.layer && back.op == d.op && back.run == d.run, "reformatted drill parses differently");
    FUZZ_CHECK(printable_message(sg::cli::describe_drill(d)), "unprintable drill description");
    try {
      sg::cli::check_fault_fired(d, d.run - 1, "in the fuzzer");
      FUZZ_CHECK(false, "a drill whose run never came passed");
    } catch (const sg::Error& e) {
      FUZZ_CHECK(printable_message(e.what()), "unprintable message");
    }
    sg::cli::check_fault_fired(d, d.run, "in the fuzzer");  // its run came: no error
  } catch (const sg::Error& e) {
    FUZZ_CHECK(printable_message(e.what()), "unprintable or oversized message (%zu bytes)",
               std::string(e.what()).size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz_fault_after(text);
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
