// fuzz_lt_choices: a cuBLASLt choices file's text (models/lt_choices.h) through parse_json and
// parse_lt_choices, as load_lt_choices reads it. sg::Error is the expected outcome of a bad file
// and its message must be printable; an accepted document must hold shapes the launcher can take
// (positive sizes, ldx >= K, ldy >= N, power-of-two alignments up to 256) and must survive a round
// trip: the document written for its choices parses back to the same choices.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "models/json_read.h"
#include "models/lt_choices.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

constexpr size_t kVersion = 130000;
const char* const kDevice = "NVIDIA H200";

bool same(const std::vector<sg::LtChoiceRecord>& a, const std::vector<sg::LtChoiceRecord>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i].shape == b[i].shape) || a[i].workspace_bytes != b[i].workspace_bytes || a[i].algo != b[i].algo ||
        a[i].text != b[i].text)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<sg::LtChoiceRecord> records;
  try {
    records = sg::parse_lt_choices(sg::parse_json(text, "fuzz/lt.json"), "fuzz/lt.json", kVersion, kDevice);
  } catch (const sg::Error& e) {
    FUZZ_CHECK(printable_message(e.what()), "unprintable or oversized message (%zu bytes)",
               std::string(e.what()).size());
    return 0;
  }
  for (const auto& r : records) {
    const sg::LtShape& s = r.shape;
    FUZZ_CHECK(s.M > 0 && s.N > 0 && s.K > 0 && s.ldx >= s.K && s.ldy >= s.N, "an accepted shape M=%lld N=%lld K=%lld",
               static_cast<long long>(s.M), static_cast<long long>(s.N), static_cast<long long>(s.K));
    for (int a : {s.align_x, s.align_w, s.align_y})
      FUZZ_CHECK(a >= 1 && a <= 256 && (a & (a - 1)) == 0, "an accepted alignment %d", a);
    FUZZ_CHECK(printable_message(r.text), "an unprintable text");
  }
  const nlohmann::json doc = sg::lt_choices_document(records, kVersion, kDevice);
  std::vector<sg::LtChoiceRecord> back;
  try {
    back = sg::parse_lt_choices(sg::parse_json(doc.dump(), "fuzz/again.json"), "fuzz/again.json", kVersion, kDevice);
  } catch (const sg::Error& e) {
    FUZZ_CHECK(false, "the written document does not parse back: %s", e.what());
  }
  FUZZ_CHECK(same(records, back), "the round trip changed the choices");
  return 0;
}
