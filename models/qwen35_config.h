// qwen35_config.h: the dimensions of a Qwen3.5 hybrid model (docs/MODEL.md) and the built-in
// presets. Hugging Face config.json files are parsed into the same struct by models/hf_config.h.
// Field <- HF key (text config): hidden <- hidden_size, layers <- num_hidden_layers,
// intermediate <- intermediate_size, vocab <- vocab_size, Hq/Hkv/D <- num_attention_heads /
// num_key_value_heads / head_dim, gdn <- linear_*, layer_types <- layer_types (or derived from
// full_attention_interval), rms_eps <- rms_norm_eps, rope_theta <- rope_parameters.rope_theta,
// partial_rotary <- partial_rotary_factor, tie_word_embeddings <- tie_word_embeddings.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sg {

struct GdnDims {
  int Hk = 16, Hv = 32, Dk = 128, Dv = 128, K = 4;
  int C() const { return 2 * Hk * Dk + Hv * Dv; }  // conv channels, ordered q | k | v
};

// The mixer of one decoder layer (HF `layer_types` entries).
enum class LayerType : uint8_t { linear_attention, full_attention };

// "linear_attention" / "full_attention" (the HF strings).
std::string_view layer_type_name(LayerType t);

// HF's Qwen3_5TextConfig default when config.json has no `layer_types`: layer i is full attention
// when (i + 1) % full_attention_interval == 0, else linear attention (GDN). With the default
// interval 4: three GDN layers then one attention layer, repeated.
std::vector<LayerType> default_layer_types(int layers, int full_attention_interval = 4);

// The Qwen3.5 models' context length (their config.json's max_position_embeddings).
inline constexpr int kQwen35ContextLength = 262144;

struct Qwen35Config {
  std::string name;
  int hidden = 2560, layers = 32, intermediate = 9216, vocab = 248320;
  int Hq = 16, Hkv = 4, D = 256;  // attention heads, KV heads, head_dim
  GdnDims gdn;
  std::vector<LayerType> layer_types = default_layer_types(32);  // one per layer
  float rms_eps = 1e-6f;
  double rope_theta = 1e7;
  double partial_rotary = 0.25;     // rotary dim = D * partial_rotary (an even integer)
  bool tie_word_embeddings = true;  // lm_head is the embedding matrix (the 4B ties; the 27B does not)
  // Positions the model was made for (config.json's max_position_embeddings; the presets:
  // kQwen35ContextLength); 0 where a config.json does not say. generate refuses a prompt plus
  // --max-new past it.
  int max_positions = kQwen35ContextLength;

  int rotary_dim() const;  // D * partial_rotary, rounded (validate() checks it is an even integer)
  bool is_full_attention(int layer) const {
    return layer_types.at(static_cast<size_t>(layer)) == LayerType::full_attention;
  }
  int num_full_attention() const;
  int num_linear_attention() const { return layers - num_full_attention(); }
  // Throws sg::Error starting with `origin` on any inconsistency: non-positive sizes, Hv not a
  // multiple of Hk, Hq not a multiple of Hkv, layer_types.size() != layers, a rotary dim that is
  // not an even integer in (0, D], non-positive eps or theta.
  void validate(const std::string& origin) const;
};

// "qwen3.5-4b" (default), "qwen3.5-27b", "tiny" (for CPU runs and tests: 6 layers, attention at
// layers 2 and 5), "tiny-dkdv" (like tiny, with Dk != Dv, Hv/Hk = 3 and tied embeddings). Throws
// sg::Error listing the valid names for anything else.
Qwen35Config preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace sg
