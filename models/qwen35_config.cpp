// qwen35_config.cpp: layer patterns, validation and the built-in presets (numbers from
// docs/MODEL.md's table).
#include "models/qwen35_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "engine/error.h"

namespace sg {

std::string_view layer_type_name(LayerType t) {
  return t == LayerType::full_attention ? "full_attention" : "linear_attention";
}

std::vector<LayerType> default_layer_types(int layers, int full_attention_interval) {
  require(layers >= 0 && full_attention_interval > 0,
          "default_layer_types: layers {} and interval {} must be >= 0 and > 0", layers, full_attention_interval);
  std::vector<LayerType> t(static_cast<size_t>(layers));
  for (int i = 0; i < layers; ++i) {
    t[static_cast<size_t>(i)] =
        (i + 1) % full_attention_interval == 0 ? LayerType::full_attention : LayerType::linear_attention;
  }
  return t;
}

int Qwen35Config::rotary_dim() const { return static_cast<int>(std::lround(D * partial_rotary)); }

int Qwen35Config::num_full_attention() const {
  int n = 0;
  for (LayerType t : layer_types) n += t == LayerType::full_attention ? 1 : 0;
  return n;
}

void Qwen35Config::validate(const std::string& origin) const {
  auto fail = [&](const std::string& what) { throw Error(fmt::format("{}: {}", origin, what)); };
  const std::pair<const char*, int> sizes[] = {{"hidden_size", hidden},
                                               {"num_hidden_layers", layers},
                                               {"intermediate_size", intermediate},
                                               {"vocab_size", vocab},
                                               {"num_attention_heads", Hq},
                                               {"num_key_value_heads", Hkv},
                                               {"head_dim", D},
                                               {"linear_num_key_heads", gdn.Hk},
                                               {"linear_num_value_heads", gdn.Hv},
                                               {"linear_key_head_dim", gdn.Dk},
                                               {"linear_value_head_dim", gdn.Dv},
                                               {"linear_conv_kernel_dim", gdn.K}};
  for (const auto& [key, v] : sizes) {
    if (v <= 0) fail(fmt::format("{} must be positive, got {}", key, v));
  }
  if (gdn.Hv % gdn.Hk != 0) {
    fail(fmt::format("linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})", gdn.Hv, gdn.Hk));
  }
  if (Hq % Hkv != 0) {
    fail(fmt::format("num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", Hq, Hkv));
  }
  // Every channel count and per-layer state size must fit an int (and the products below an int64).
  const int64_t C = 2LL * gdn.Hk * gdn.Dk + static_cast<int64_t>(gdn.Hv) * gdn.Dv;
  if (C > std::numeric_limits<int>::max() || 2LL * Hq * D > std::numeric_limits<int>::max()) {
    fail(fmt::format("sizes too large (conv channels {}, q_proj rows {})", C, 2LL * Hq * D));
  }
  if (layer_types.size() != static_cast<size_t>(layers)) {
    fail(fmt::format("layer_types has {} entries but num_hidden_layers is {}", layer_types.size(), layers));
  }
  if (!(rms_eps > 0.f) || !std::isfinite(rms_eps)) fail(fmt::format("rms_norm_eps must be positive, got {}", rms_eps));
  if (!(rope_theta > 0.0) || !std::isfinite(rope_theta)) {
    fail(fmt::format("rope_theta must be positive, got {}", rope_theta));
  }
  const double r = D * partial_rotary;
  if (!(partial_rotary > 0.0 && partial_rotary <= 1.0) || std::abs(r - std::round(r)) > 1e-9 ||
      static_cast<long long>(std::llround(r)) % 2 != 0) {
    fail(fmt::format("head_dim * partial_rotary_factor = {} * {} = {} must be an even integer in (0, head_dim]", D,
                     partial_rotary, r));
  }
}

std::vector<std::string> preset_names() { return {"qwen3.5-4b", "qwen3.5-27b", "tiny", "tiny-dkdv"}; }

Qwen35Config preset(const std::string& name) {
  Qwen35Config c;
  c.name = name;
  if (name == "qwen3.5-4b") {
    // The defaults are the 4B model: 24 GDN + 8 attention layers, tied embeddings.
  } else if (name == "qwen3.5-27b") {
    c.hidden = 5120;
    c.layers = 64;
    c.intermediate = 17408;
    c.Hq = 24;
    c.gdn = GdnDims{16, 48, 128, 128, 4};
    c.layer_types = default_layer_types(64);  // 48 GDN + 16 attention
    c.tie_word_embeddings = false;
  } else if (name == "tiny" || name == "tiny-dkdv") {
    c.hidden = 64;
    c.layers = 6;
    c.intermediate = 128;
    c.vocab = 256;
    c.Hq = 4;
    c.Hkv = 2;
    c.D = 32;                                   // rotary dim 8
    c.layer_types = default_layer_types(6, 3);  // linear, linear, full, linear, linear, full
    if (name == "tiny") {
      c.gdn = GdnDims{2, 4, 32, 32, 4};
      c.tie_word_embeddings = false;
    } else {
      c.gdn = GdnDims{2, 6, 32, 64, 4};  // Hv/Hk = 3, Dk != Dv: C = 512
      c.tie_word_embeddings = true;
    }
  } else {
    throw Error(fmt::format("unknown preset '{}' (valid: {})", name, fmt::join(preset_names(), ", ")));
  }
  c.validate(fmt::format("preset '{}'", name));
  return c;
}

}  // namespace sg
