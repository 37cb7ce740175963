// qwen35_config.h: the dimensions of a Qwen3.5 hybrid model (MODEL-MATH.md) and the built-in
// presets. Parsing Hugging Face config.json files comes with the model issue; the presets are
// what every command defaults to.
#pragma once
#include <string>
#include <vector>

namespace sg {

struct GdnDims {
  int Hk = 16, Hv = 32, Dk = 128, Dv = 128, K = 4;
  int C() const { return 2 * Hk * Dk + Hv * Dv; }  // conv channels, ordered q | k | v
};

struct Qwen35Config {
  std::string name;
  int hidden = 2560, layers = 32, intermediate = 9216, vocab = 248320;
  int Hq = 16, Hkv = 4, D = 256;
  GdnDims gdn;
  float rms_eps = 1e-6f;
  double rope_theta = 1e7;
  double partial_rotary = 0.25;
};

// "qwen3.5-4b" (default), "qwen3.5-27b", "tiny" (for CPU runs and tests). Throws sg::Error listing
// the valid names for anything else.
Qwen35Config preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace sg
