// fuzz_hf_config: a config.json's text through parse_json (the depth limit, duplicate keys) and
// parse_hf_config, as load_hf_config reads it. sg::Error is the expected outcome of a bad file;
// an accepted config must pass Qwen35Config::validate (models/hf_config.h promises a valid config)
// and its messages must be printable.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "models/hf_config.h"
#include "models/json_read.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  sg::Qwen35Config c;
  try {
    const nlohmann::json j = sg::parse_json(text, "fuzz/config.json");
    const std::string excerpt = sg::json_excerpt(j);
    FUZZ_CHECK(excerpt.size() < 400, "json_excerpt of %zu bytes", excerpt.size());
    c = sg::parse_hf_config(j, "fuzz/config.json");
  } catch (const sg::Error& e) {
    FUZZ_CHECK(printable_message(e.what()), "unprintable or oversized message (%zu bytes)",
               std::string(e.what()).size());
    return 0;
  }
  try {
    c.validate("fuzz/config.json");
  } catch (const sg::Error& e) {
    FUZZ_CHECK(false, "an accepted config fails validate(): %s", e.what());
  }
  FUZZ_CHECK(c.layer_types.size() == static_cast<size_t>(c.layers), "layer_types %zu, layers %d", c.layer_types.size(),
             c.layers);
  return 0;
}
