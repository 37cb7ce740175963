// hf_config.cpp: reading a Hugging Face Qwen3.5 config.json (see hf_config.h for the keys).
#include "models/hf_config.h"

#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/text.h"
#include "models/json_read.h"

namespace sg {
namespace {

using nlohmann::json;

// A JSON value for an error message: short and printable, however large or deep the value is.
std::string show(const json& v) { return json_excerpt(v); }

// Reads keys of one JSON object; every error names origin and the key's full path.
class Keys {
 public:
  Keys(const json& obj, std::string origin, std::string prefix)
      : obj_(&obj), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(fmt::format("{}: key '{}{}': {}", origin_, prefix_, key, what));
  }
  // The value of `key`, or nullptr when absent or null (HF writes null for unset options).
  const json* find(const std::string& key) const {
    auto it = obj_->find(key);
    if (it == obj_->end() || it->is_null()) return nullptr;
    return &*it;
  }
  const json& need(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail(key, "missing (required)");
    return *v;
  }
  int to_positive_int(const std::string& key, const json& v) const {
    if (!v.is_number_integer()) fail(key, fmt::format("must be an integer, got {}", show(v)));
    // Parsed non-negative numbers are unsigned in nlohmann::json, built ones may be signed.
    if (!v.is_number_unsigned() && v.get<int64_t>() <= 0) fail(key, fmt::format("must be positive, got {}", show(v)));
    const auto u = v.get<uint64_t>();
    if (u == 0) fail(key, "must be positive, got 0");
    if (u > static_cast<uint64_t>(std::numeric_limits<int>::max())) fail(key, fmt::format("too large: {}", u));
    return static_cast<int>(u);
  }
  int positive_int(const std::string& key) const { return to_positive_int(key, need(key)); }
  double to_positive_number(const std::string& key, const json& v) const {
    if (!v.is_number()) fail(key, fmt::format("must be a number, got {}", show(v)));
    double d = v.get<double>();
    if (!(d > 0.0) || !std::isfinite(d)) fail(key, fmt::format("must be a positive number, got {}", show(v)));
    return d;
  }
  std::optional<bool> opt_bool(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) fail(key, fmt::format("must be true or false, got {}", show(*v)));
    return v->get<bool>();
  }
  std::optional<std::string> opt_string(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(key, fmt::format("must be a string, got {}", show(*v)));
    return v->get<std::string>();
  }
  // A nested object (absent or null: nullopt), with its own key prefix.
  std::optional<Keys> opt_object(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_object()) fail(key, fmt::format("must be an object, got {}", show(*v)));
    return Keys(*v, origin_, prefix_ + key + ".");
  }
  const std::string& prefix() const { return prefix_; }

 private:
  const json* obj_;  // an object, owned by the caller
  std::string origin_;
  std::string prefix_;
};

}  // namespace

Qwen35Config parse_hf_config(const json& config, const std::string& origin) {
  if (!config.is_object())
    throw Error(fmt::format("{}: the config must be a JSON object, got {}", origin, show(config)));
  const Keys top(config, origin, "");
  const std::optional<Keys> nested = top.opt_object("text_config");
  const Keys& t = nested ? *nested : top;

  Qwen35Config c;
  c.name = origin;
  c.hidden = t.positive_int("hidden_size");
  c.layers = t.positive_int("num_hidden_layers");
  c.intermediate = t.positive_int("intermediate_size");
  c.vocab = t.positive_int("vocab_size");
  c.Hq = t.positive_int("num_attention_heads");
  c.Hkv = t.positive_int("num_key_value_heads");
  c.D = t.positive_int("head_dim");
  c.gdn.Hk = t.positive_int("linear_num_key_heads");
  c.gdn.Hv = t.positive_int("linear_num_value_heads");
  c.gdn.Dk = t.positive_int("linear_key_head_dim");
  c.gdn.Dv = t.positive_int("linear_value_head_dim");
  c.gdn.K = t.positive_int("linear_conv_kernel_dim");
  if (c.gdn.Hv % c.gdn.Hk != 0) {
    t.fail("linear_num_value_heads",
           fmt::format("{} is not a multiple of linear_num_key_heads ({})", c.gdn.Hv, c.gdn.Hk));
  }
  if (c.Hq % c.Hkv != 0) {
    t.fail("num_attention_heads", fmt::format("{} is not a multiple of num_key_value_heads ({})", c.Hq, c.Hkv));
  }
  c.rms_eps = static_cast<float>(t.to_positive_number("rms_norm_eps", t.need("rms_norm_eps")));

  // Rotary embedding, with HF's precedence: a non-empty legacy rope_scaling replaces
  // rope_parameters (transformers 5); keys missing there come from the top level (rope_theta,
  // partial_rotary_factor). Unlike HF, a missing theta is an error, not 10000.
  std::optional<Keys> rope = t.opt_object("rope_scaling");
  if (!rope || t.find("rope_scaling")->empty()) rope = t.opt_object("rope_parameters");
  if (rope) {
    for (const char* key : {"rope_type", "type"}) {
      if (auto type = rope->opt_string(key); type && *type != "default") {
        rope->fail(key, fmt::format("'{}' is not supported (only 'default')", printable(*type)));
      }
    }
  }
  if (rope && rope->find("rope_theta")) {
    c.rope_theta = rope->to_positive_number("rope_theta", *rope->find("rope_theta"));
  } else if (t.find("rope_theta")) {
    c.rope_theta = t.to_positive_number("rope_theta", *t.find("rope_theta"));
  } else {
    t.fail("rope_parameters.rope_theta", "missing (required; the legacy top-level rope_theta is accepted too)");
  }
  const Keys* prf_keys = nullptr;
  if (rope && rope->find("partial_rotary_factor")) {
    prf_keys = &*rope;
  } else if (t.find("partial_rotary_factor")) {
    prf_keys = &t;
  }
  c.partial_rotary = 0.25;
  if (prf_keys) {
    c.partial_rotary = prf_keys->to_positive_number("partial_rotary_factor", *prf_keys->find("partial_rotary_factor"));
    const double r = c.D * c.partial_rotary;
    if (c.partial_rotary > 1.0 || std::abs(r - std::round(r)) > 1e-9 || std::llround(r) % 2 != 0) {
      prf_keys->fail(
          "partial_rotary_factor",
          fmt::format("head_dim * partial_rotary_factor = {} * {} = {} must be an even integer in (0, head_dim]", c.D,
                      c.partial_rotary, r));
    }
  }

  // Layer pattern.
  if (const json* lt = t.find("layer_types")) {
    if (!lt->is_array()) t.fail("layer_types", fmt::format("must be a list, got {}", show(*lt)));
    if (lt->size() != static_cast<size_t>(c.layers)) {
      t.fail("layer_types", fmt::format("has {} entries but num_hidden_layers is {}", lt->size(), c.layers));
    }
    c.layer_types.clear();
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& e = (*lt)[i];
      const std::string key = fmt::format("layer_types[{}]", i);
      if (e == "linear_attention") {
        c.layer_types.push_back(LayerType::linear_attention);
      } else if (e == "full_attention") {
        c.layer_types.push_back(LayerType::full_attention);
      } else {
        t.fail(key, fmt::format("unknown layer type {} (valid: \"linear_attention\", \"full_attention\")", show(e)));
      }
    }
  } else {
    int interval = 4;
    if (const json* v = t.find("full_attention_interval")) interval = t.to_positive_int("full_attention_interval", *v);
    c.layer_types = default_layer_types(c.layers, interval);
  }

  // Optional (HF's default is the model class's): positions past it were never trained.
  // Past INT_MAX it limits nothing a step can hold: kept as INT_MAX rather than refused.
  c.max_positions = 0;
  if (const json* v = t.find("max_position_embeddings")) {
    const bool huge = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT_MAX);
    c.max_positions = huge ? INT_MAX : t.to_positive_int("max_position_embeddings", *v);
  }

  // Embedding tying: the text config's key, else the top level's; HF's default is false.
  std::optional<bool> tie = t.opt_bool("tie_word_embeddings");
  if (nested) {
    std::optional<bool> top_tie = top.opt_bool("tie_word_embeddings");
    if (tie && top_tie && *tie != *top_tie) {
      t.fail("tie_word_embeddings", fmt::format("is {} but the top-level tie_word_embeddings is {}", *tie, *top_tie));
    }
    if (!tie) tie = top_tie;
  }
  c.tie_word_embeddings = tie.value_or(false);

  // Variants the engine does not implement: refuse them here rather than fail on weight shapes.
  if (auto gate = t.opt_bool("attn_output_gate"); gate && !*gate) {
    t.fail("attn_output_gate", "false is not supported (stepgraph implements the gated attention of Qwen3.5)");
  }
  if (const json* ne = t.find("num_experts")) {
    if (!ne->is_number_integer() || ne->get<int64_t>() != 0) {
      t.fail("num_experts", fmt::format("{}: mixture-of-experts models are not supported", show(*ne)));
    }
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (auto bias = t.opt_bool(key); bias && *bias) {
      t.fail(key, "true is not supported (Qwen3.5's projections have no biases)");
    }
  }
  if (auto act = t.opt_string("hidden_act"); act && *act != "silu") {
    t.fail("hidden_act", fmt::format("'{}' is not supported (only 'silu')", printable(*act)));
  }

  c.validate(origin);
  return c;
}

Qwen35Config load_hf_config(const std::filesystem::path& config_json) {
  const std::string origin = printable(config_json.string(), 4096);
  // A regular file of at most 64 MiB, nested at most 64 deep, no key twice (models/json_read.h).
  const json j = read_json_file(config_json);
  Qwen35Config c = parse_hf_config(j, origin);
  const std::string folder = config_json.parent_path().filename().string();
  if (!folder.empty()) c.name = folder;
  return c;
}

}  // namespace sg
