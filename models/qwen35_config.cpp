// qwen35_config.cpp: built-in presets (numbers from MODEL-MATH.md's table).
#include "models/qwen35_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/error.h"

namespace sg {

std::vector<std::string> preset_names() { return {"qwen3.5-4b", "qwen3.5-27b", "tiny"}; }

Qwen35Config preset(const std::string& name) {
  Qwen35Config c;
  c.name = name;
  if (name == "qwen3.5-4b") {
    return c;  // the defaults are the 4B model
  }
  if (name == "qwen3.5-27b") {
    c.hidden = 5120;
    c.layers = 64;
    c.intermediate = 17408;
    c.Hq = 24;
    c.gdn = GdnDims{16, 48, 128, 128, 4};
    return c;
  }
  if (name == "tiny") {
    c.hidden = 64;
    c.layers = 4;
    c.intermediate = 128;
    c.vocab = 256;
    c.Hq = 4;
    c.Hkv = 2;
    c.D = 32;
    c.gdn = GdnDims{2, 4, 32, 32, 4};
    return c;
  }
  throw Error(fmt::format("unknown preset '{}' (valid: {})", name, fmt::join(preset_names(), ", ")));
}

}  // namespace sg
