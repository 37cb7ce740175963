// fuzz_arms: the arm selection parsers (kernels/arms.h). The input is cut into an ArmSelection text,
// a few `--arm` values and an environment (STEPGRAPH_ARMS and the seed's VT_* flags) served by a
// map lookup. ArmError is the expected outcome of a bad name or list. Promises checked:
// parse(describe()) gives the selection back, every op's source is one of the documented ones,
// messages and warnings are printable, and the same input resolves the same way twice.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/arms.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void check_selection(const sg::ArmSelection& s) {
  for (const sg::OpInfo& op : sg::all_ops()) FUZZ_CHECK(s.index(op.op) < op.arms.size(), "arm index out of range");
  const std::string d = s.describe();
  sg::ArmSelection back;
  try {
    back = sg::ArmSelection::parse(d);
  } catch (const sg::ArmError& e) {
    FUZZ_CHECK(false, "describe() '%s' does not parse: %s", d.c_str(), e.what());
  }
  FUZZ_CHECK(back == s, "parse(describe()) differs: %s", d.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string text = in.ConsumeRandomLengthString(256);
  try {
    check_selection(sg::ArmSelection::parse(text));
  } catch (const sg::ArmError& e) {
    FUZZ_CHECK(printable_message(e.what()), "unprintable or oversized message");
  }

  std::vector<std::string> cli(in.ConsumeIntegralInRange<size_t>(0, 4));
  for (std::string& a : cli) a = in.ConsumeRandomLengthString(64);
  std::map<std::string, std::string, std::less<>> env;
  if (in.ConsumeBool()) env[std::string(sg::kArmsEnvVar)] = in.ConsumeRandomLengthString(128);
  for (std::string_view flag : sg::seed_flag_names()) {
    if (in.ConsumeBool()) env[std::string(flag)] = in.ConsumeRandomLengthString(8);
  }
  int lookups_outside = 0;
  const sg::EnvLookup lookup = [&](std::string_view name) -> std::optional<std::string> {
    bool known = name == sg::kArmsEnvVar;
    for (std::string_view f : sg::seed_flag_names()) known = known || name == f;
    if (!known) ++lookups_outside;
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  std::optional<sg::ResolvedArms> first;
  std::string first_error;
  for (int round = 0; round < 2; ++round) {
    try {
      sg::ResolvedArms r = sg::resolve_arms(cli, lookup);
      FUZZ_CHECK(round == 0 || first, "resolved only the second time");
      check_selection(r.arms);
      for (const std::string& src : r.source) {
        FUZZ_CHECK(src == "default" || src == "--arm" || src == "STEPGRAPH_ARMS" || src.rfind("VT_", 0) == 0,
                   "unexpected source '%s'", src.c_str());
        FUZZ_CHECK(printable_message(src), "unprintable source");
      }
      for (const std::string& w : r.warnings) FUZZ_CHECK(printable_message(w), "unprintable warning");
      if (round == 1) FUZZ_CHECK(first->arms == r.arms && first->source == r.source, "not deterministic");
      first = std::move(r);
    } catch (const sg::ArmError& e) {
      FUZZ_CHECK(printable_message(e.what()), "unprintable or oversized message");
      FUZZ_CHECK(round == 0 || (!first && first_error == e.what()), "not deterministic");
      first_error = e.what();
    }
  }
  FUZZ_CHECK(lookups_outside == 0, "resolve_arms looked up a variable it does not document");
  return 0;
}
