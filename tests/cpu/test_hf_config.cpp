// CPU tests of Hugging Face config.json parsing (models/hf_config.h) and of the built-in presets.
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "models/hf_config.h"
#include "models/qwen35_config.h"
#include "tests/support/catch.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

using namespace sg;
using nlohmann::json;

namespace {

std::vector<std::string> pattern_strings(int layers, int interval) {
  std::vector<std::string> v;
  for (int i = 0; i < layers; ++i) v.push_back((i + 1) % interval == 0 ? "full_attention" : "linear_attention");
  return v;
}

// The text part of a Qwen3.5-4B-like config.json, as save_pretrained writes it.
json text_4b() {
  return json{
      {"model_type", "qwen3_5_text"},
      {"architectures", {"Qwen3_5ForCausalLM"}},
      {"hidden_size", 2560},
      {"num_hidden_layers", 32},
      {"intermediate_size", 9216},
      {"vocab_size", 248320},
      {"num_attention_heads", 16},
      {"num_key_value_heads", 4},
      {"head_dim", 256},
      {"linear_num_key_heads", 16},
      {"linear_num_value_heads", 32},
      {"linear_key_head_dim", 128},
      {"linear_value_head_dim", 128},
      {"linear_conv_kernel_dim", 4},
      {"rms_norm_eps", 1e-6},
      {"hidden_act", "silu"},
      {"attn_output_gate", true},
      {"attention_bias", false},
      {"tie_word_embeddings", true},
      {"full_attention_interval", 4},
      {"layer_types", pattern_strings(32, 4)},
      {"max_position_embeddings", 262144},
      {"mamba_ssm_dtype", "float32"},
      {"dtype", "bfloat16"},
      {"rope_scaling", nullptr},
      {"rope_parameters",
       {{"rope_type", "default"},
        {"rope_theta", 10000000},
        {"partial_rotary_factor", 0.25},
        {"mrope_interleaved", true},
        {"mrope_section", {11, 11, 10}}}},
  };
}

// The multimodal layout: the text part nested under text_config, next to a vision config.
json multimodal(const json& text) {
  return json{{"architectures", {"Qwen3_5ForConditionalGeneration"}},
              {"model_type", "qwen3_5"},
              {"text_config", text},
              {"vision_config", {{"depth", 24}, {"hidden_size", 1024}, {"model_type", "qwen3_5_vision"}}},
              {"tie_word_embeddings", true}};
}

void check_same_model(const Qwen35Config& a, const Qwen35Config& b) {
  CHECK(a.hidden == b.hidden);
  CHECK(a.layers == b.layers);
  CHECK(a.intermediate == b.intermediate);
  CHECK(a.vocab == b.vocab);
  CHECK(a.Hq == b.Hq);
  CHECK(a.Hkv == b.Hkv);
  CHECK(a.D == b.D);
  CHECK(a.gdn.Hk == b.gdn.Hk);
  CHECK(a.gdn.Hv == b.gdn.Hv);
  CHECK(a.gdn.Dk == b.gdn.Dk);
  CHECK(a.gdn.Dv == b.gdn.Dv);
  CHECK(a.gdn.K == b.gdn.K);
  CHECK(a.layer_types == b.layer_types);
  CHECK(a.rms_eps == b.rms_eps);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.partial_rotary == b.partial_rotary);
  CHECK(a.rotary_dim() == b.rotary_dim());
  CHECK(a.tie_word_embeddings == b.tie_word_embeddings);
}

using sg::test::expect_error;

using sg::test::TempDir;

void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

}  // namespace

TEST_CASE("HF config: a 4B-like text config gives the 4B preset", "[models][config]") {
  Qwen35Config c = parse_hf_config(text_4b(), "4b/config.json");
  check_same_model(c, preset("qwen3.5-4b"));
  CHECK(c.name == "4b/config.json");
  CHECK(c.num_full_attention() == 8);
  CHECK(c.num_linear_attention() == 24);
  CHECK(c.rotary_dim() == 64);
  CHECK(c.gdn.C() == 8192);
  CHECK(c.is_full_attention(3));
  CHECK_FALSE(c.is_full_attention(0));
  CHECK(c.is_full_attention(31));
}

TEST_CASE("HF config: max_position_embeddings is read where given, and checked", "[models][config]") {
  CHECK(parse_hf_config(text_4b(), "c").max_positions == 262144);
  CHECK(preset("qwen3.5-4b").max_positions == 262144);
  json j = text_4b();
  j["max_position_embeddings"] = 4096;
  CHECK(parse_hf_config(j, "c").max_positions == 4096);
  CHECK(parse_hf_config(multimodal(j), "c").max_positions == 4096);
  j.erase("max_position_embeddings");
  CHECK(parse_hf_config(j, "c").max_positions == 0);  // not said: not checked
  j["max_position_embeddings"] = nullptr;
  CHECK(parse_hf_config(j, "c").max_positions == 0);
  j["max_position_embeddings"] = uint64_t{10000000000};  // past INT_MAX: no limit that matters
  CHECK(parse_hf_config(j, "c").max_positions == INT_MAX);
  for (const json& bad : {json(0), json(-5), json(1.5), json("4096")}) {
    CAPTURE(bad.dump());
    j["max_position_embeddings"] = bad;
    expect_error([&] { parse_hf_config(j, "c/config.json"); }, {"c/config.json: key 'max_position_embeddings'"});
  }
}

TEST_CASE("HF config: a multimodal config reads its nested text_config", "[models][config]") {
  Qwen35Config c = parse_hf_config(multimodal(text_4b()), "mm/config.json");
  check_same_model(c, preset("qwen3.5-4b"));

  SECTION("tie_word_embeddings only at the top level is used") {
    json j = multimodal(text_4b());
    j["text_config"].erase("tie_word_embeddings");
    CHECK(parse_hf_config(j, "x").tie_word_embeddings);
    j["tie_word_embeddings"] = false;
    CHECK_FALSE(parse_hf_config(j, "x").tie_word_embeddings);
  }
  SECTION("absent everywhere it defaults to false, as in HF") {
    json j = multimodal(text_4b());
    j["text_config"].erase("tie_word_embeddings");
    j.erase("tie_word_embeddings");
    CHECK_FALSE(parse_hf_config(j, "x").tie_word_embeddings);
  }
  SECTION("conflicting values are an error naming both") {
    json j = multimodal(text_4b());
    j["tie_word_embeddings"] = false;
    expect_error([&] { parse_hf_config(j, "mm/config.json"); },
                 {"mm/config.json", "text_config.tie_word_embeddings", "top-level"});
  }
  SECTION("errors name the nested key") {
    json j = multimodal(text_4b());
    j["text_config"].erase("hidden_size");
    expect_error([&] { parse_hf_config(j, "mm/config.json"); },
                 {"mm/config.json", "'text_config.hidden_size'", "missing"});
  }
}

TEST_CASE("HF config: a 27B-like config gives the 27B preset", "[models][config]") {
  json t = text_4b();
  t["hidden_size"] = 5120;
  t["num_hidden_layers"] = 64;
  t["intermediate_size"] = 17408;
  t["num_attention_heads"] = 24;
  t["linear_num_value_heads"] = 48;
  t["tie_word_embeddings"] = false;
  t.erase("layer_types");  // derived from full_attention_interval
  json j = multimodal(t);
  j["tie_word_embeddings"] = false;
  Qwen35Config c = parse_hf_config(j, "27b");
  check_same_model(c, preset("qwen3.5-27b"));
  CHECK(c.num_full_attention() == 16);
  CHECK(c.gdn.C() == 10240);
}

TEST_CASE("HF config: the layer pattern without layer_types follows full_attention_interval", "[models][config]") {
  json t = text_4b();
  t.erase("layer_types");
  SECTION("default interval 4: three GDN layers then one attention layer") {
    t.erase("full_attention_interval");
    Qwen35Config c = parse_hf_config(t, "x");
    REQUIRE(c.layer_types.size() == 32);
    for (int i = 0; i < 32; ++i) {
      INFO("layer " << i);
      CHECK(c.is_full_attention(i) == ((i % 4) == 3));
    }
  }
  SECTION("interval 2 alternates") {
    t["full_attention_interval"] = 2;
    Qwen35Config c = parse_hf_config(t, "x");
    CHECK(c.layer_types[0] == LayerType::linear_attention);
    CHECK(c.layer_types[1] == LayerType::full_attention);
    CHECK(c.num_full_attention() == 16);
  }
  SECTION("a layer count that is not a multiple of the interval") {
    t["num_hidden_layers"] = 6;
    Qwen35Config c = parse_hf_config(t, "x");
    CHECK(c.layer_types == default_layer_types(6, 4));
    CHECK(c.num_full_attention() == 1);
  }
  SECTION("an explicit list wins over the interval") {
    t["num_hidden_layers"] = 3;
    t["layer_types"] = {"full_attention", "linear_attention", "full_attention"};
    Qwen35Config c = parse_hf_config(t, "x");
    CHECK(c.layer_types ==
          std::vector<LayerType>{LayerType::full_attention, LayerType::linear_attention, LayerType::full_attention});
  }
}

TEST_CASE("HF config: rope keys, current and legacy", "[models][config]") {
  json t = text_4b();
  SECTION("rope_parameters.rope_theta") {
    t["rope_parameters"]["rope_theta"] = 5000000.0;
    CHECK(parse_hf_config(t, "x").rope_theta == 5e6);
  }
  SECTION("legacy top-level rope_theta and partial_rotary_factor") {
    t.erase("rope_parameters");
    t["rope_theta"] = 10000;
    t["partial_rotary_factor"] = 0.5;
    Qwen35Config c = parse_hf_config(t, "x");
    CHECK(c.rope_theta == 10000.0);
    CHECK(c.partial_rotary == 0.5);
    CHECK(c.rotary_dim() == 128);
  }
  SECTION("rope_parameters without partial_rotary_factor falls back to the top level, then 0.25") {
    t["rope_parameters"].erase("partial_rotary_factor");
    CHECK(parse_hf_config(t, "x").partial_rotary == 0.25);
    t["partial_rotary_factor"] = 1.0;
    CHECK(parse_hf_config(t, "x").rotary_dim() == 256);
  }
  SECTION("rope_parameters wins over the top-level key") {
    t["rope_theta"] = 1.0;
    CHECK(parse_hf_config(t, "x").rope_theta == 1e7);
  }
  SECTION("a non-empty rope_scaling replaces rope_parameters, as in HF") {
    t["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
    expect_error([&] { parse_hf_config(t, "x"); }, {"'rope_scaling.type'", "yarn"});
    t["rope_scaling"] = json::object();  // empty: ignored
    CHECK(parse_hf_config(t, "x").rope_theta == 1e7);
  }
  SECTION("legacy rope_scaling holding the theta") {
    t.erase("rope_parameters");
    t["rope_scaling"] = {{"rope_type", "default"}, {"rope_theta", 123456}};
    CHECK(parse_hf_config(t, "x").rope_theta == 123456.0);
  }
}

TEST_CASE("HF config: every missing required key is an error naming the file and the key", "[models][config]") {
  const std::vector<std::string> required = {"hidden_size",
                                             "num_hidden_layers",
                                             "intermediate_size",
                                             "vocab_size",
                                             "num_attention_heads",
                                             "num_key_value_heads",
                                             "head_dim",
                                             "linear_num_key_heads",
                                             "linear_num_value_heads",
                                             "linear_key_head_dim",
                                             "linear_value_head_dim",
                                             "linear_conv_kernel_dim",
                                             "rms_norm_eps"};
  for (const auto& key : required) {
    INFO("key " << key);
    json t = text_4b();
    t.erase(key);
    expect_error([&] { parse_hf_config(t, "/m/config.json"); }, {"/m/config.json", "'" + key + "'", "missing"});
    json n = text_4b();
    n[key] = nullptr;  // null counts as missing
    expect_error([&] { parse_hf_config(n, "/m/config.json"); }, {"/m/config.json", "'" + key + "'", "missing"});
  }
  SECTION("no rope theta anywhere") {
    json t = text_4b();
    t["rope_parameters"].erase("rope_theta");
    expect_error([&] { parse_hf_config(t, "/m/config.json"); }, {"/m/config.json", "rope_theta", "missing"});
  }
}

TEST_CASE("HF config: bad values are errors naming the file and the key", "[models][config]") {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"string size", [](json& t) { t["hidden_size"] = "2560"; }, {"'hidden_size'", "integer"}},
      {"fractional size", [](json& t) { t["intermediate_size"] = 9216.5; }, {"'intermediate_size'", "integer"}},
      {"bool size", [](json& t) { t["vocab_size"] = true; }, {"'vocab_size'", "integer"}},
      {"zero size", [](json& t) { t["num_hidden_layers"] = 0; }, {"'num_hidden_layers'", "positive"}},
      {"negative size", [](json& t) { t["head_dim"] = -256; }, {"'head_dim'", "positive"}},
      {"huge size", [](json& t) { t["vocab_size"] = 1ULL << 40; }, {"'vocab_size'", "too large"}},
      {"Hv not a multiple of Hk",
       [](json& t) { t["linear_num_value_heads"] = 24; },
       {"'linear_num_value_heads'", "multiple", "linear_num_key_heads"}},
      {"Hq not a multiple of Hkv",
       [](json& t) { t["num_attention_heads"] = 6; },
       {"'num_attention_heads'", "multiple"}},
      {"unknown layer type",
       [](json& t) { t["layer_types"][5] = "sliding_attention"; },
       {"'layer_types[5]'", "sliding_attention"}},
      {"non-string layer type", [](json& t) { t["layer_types"][0] = 1; }, {"'layer_types[0]'", "unknown layer type"}},
      {"layer_types too short",
       [](json& t) { t["layer_types"].erase(t["layer_types"].size() - 1); },
       {"'layer_types'", "31 entries", "32"}},
      {"layer_types not a list", [](json& t) { t["layer_types"] = "linear_attention"; }, {"'layer_types'", "list"}},
      {"rotary dim not an integer",
       [](json& t) { t["rope_parameters"]["partial_rotary_factor"] = 0.3; },
       {"'rope_parameters.partial_rotary_factor'", "even integer"}},
      {"rotary dim odd",
       [](json& t) {
         t["head_dim"] = 12;
         t["rope_parameters"]["partial_rotary_factor"] = 0.25;
       },
       {"'rope_parameters.partial_rotary_factor'", "even integer"}},
      {"partial_rotary_factor above 1",
       [](json& t) { t["rope_parameters"]["partial_rotary_factor"] = 2.0; },
       {"partial_rotary_factor", "even integer"}},
      {"partial_rotary_factor zero",
       [](json& t) { t["rope_parameters"]["partial_rotary_factor"] = 0; },
       {"'rope_parameters.partial_rotary_factor'", "positive"}},
      {"rope_theta a string",
       [](json& t) { t["rope_parameters"]["rope_theta"] = "1e7"; },
       {"'rope_parameters.rope_theta'", "number"}},
      {"rope_theta negative",
       [](json& t) { t["rope_parameters"]["rope_theta"] = -1; },
       {"'rope_parameters.rope_theta'", "positive"}},
      {"rope_parameters not an object", [](json& t) { t["rope_parameters"] = 5; }, {"'rope_parameters'", "object"}},
      {"unsupported rope type",
       [](json& t) { t["rope_parameters"]["rope_type"] = "yarn"; },
       {"'rope_parameters.rope_type'", "yarn"}},
      {"eps zero", [](json& t) { t["rms_norm_eps"] = 0.0; }, {"'rms_norm_eps'", "positive"}},
      {"interval zero",
       [](json& t) {
         t.erase("layer_types");
         t["full_attention_interval"] = 0;
       },
       {"'full_attention_interval'", "positive"}},
      {"tie not a bool", [](json& t) { t["tie_word_embeddings"] = "yes"; }, {"'tie_word_embeddings'", "true or false"}},
      {"ungated attention", [](json& t) { t["attn_output_gate"] = false; }, {"'attn_output_gate'", "not supported"}},
      {"mixture of experts", [](json& t) { t["num_experts"] = 256; }, {"'num_experts'", "not supported"}},
      {"other activation", [](json& t) { t["hidden_act"] = "gelu"; }, {"'hidden_act'", "gelu"}},
      {"attention biases", [](json& t) { t["attention_bias"] = true; }, {"'attention_bias'", "no biases"}},
      {"MLP biases", [](json& t) { t["mlp_bias"] = true; }, {"'mlp_bias'", "no biases"}},
  };
  for (const auto& c : cases) {
    INFO("case: " << c.what);
    json t = text_4b();
    c.edit(t);
    std::vector<std::string> needles = c.needles;
    needles.push_back("/m/config.json");
    expect_error([&] { parse_hf_config(t, "/m/config.json"); }, needles);
    // The same edit inside text_config names the nested key.
    json mm = multimodal(t);
    std::vector<std::string> nested = {"/m/config.json", "text_config."};
    expect_error([&] { parse_hf_config(mm, "/m/config.json"); }, nested);
  }
  SECTION("not an object") {
    expect_error([&] { parse_hf_config(json::array({1, 2}), "/m/config.json"); }, {"/m/config.json", "object"});
    json mm = multimodal(text_4b());
    mm["text_config"] = "none";
    expect_error([&] { parse_hf_config(mm, "/m/config.json"); }, {"/m/config.json", "'text_config'", "object"});
  }
}

TEST_CASE("HF config: load_hf_config reads a file and names it in errors", "[models][config]") {
  TempDir dir;
  const auto folder = dir.path / "Qwen3.5-4B";
  std::filesystem::create_directories(folder);
  const auto file = folder / "config.json";
  SECTION("multimodal file") {
    write_text(file, multimodal(text_4b()).dump(2));
    Qwen35Config c = load_hf_config(file);
    check_same_model(c, preset("qwen3.5-4b"));
    CHECK(c.name == "Qwen3.5-4B");
  }
  SECTION("text-only file") {
    write_text(file, text_4b().dump());
    check_same_model(load_hf_config(file), preset("qwen3.5-4b"));
  }
  SECTION("not JSON") {
    write_text(file, "{\"hidden_size\": 2560,");
    expect_error([&] { load_hf_config(file); }, {file.string(), "not valid JSON"});
  }
  SECTION("empty file") {
    write_text(file, "");
    expect_error([&] { load_hf_config(file); }, {file.string(), "not valid JSON"});
  }
  SECTION("missing key") {
    json t = text_4b();
    t.erase("linear_conv_kernel_dim");
    write_text(file, t.dump());
    expect_error([&] { load_hf_config(file); }, {file.string(), "'linear_conv_kernel_dim'", "missing"});
  }
  SECTION("missing file") {
    expect_error([&] { load_hf_config(folder / "nope.json"); }, {(folder / "nope.json").string(), "cannot open"});
  }
}

TEST_CASE("presets: every preset is valid and matches the sizes table of docs/MODEL.md", "[models][config]") {
  for (const auto& name : preset_names()) {
    INFO("preset " << name);
    Qwen35Config c = preset(name);
    CHECK(c.name == name);
    CHECK(static_cast<int>(c.layer_types.size()) == c.layers);
    CHECK_NOTHROW(c.validate(name));
    CHECK(c.gdn.Hv % c.gdn.Hk == 0);
    CHECK(c.rotary_dim() % 2 == 0);
  }
  Qwen35Config b4 = preset("qwen3.5-4b");
  CHECK(b4.num_linear_attention() == 24);
  CHECK(b4.num_full_attention() == 8);
  CHECK(b4.rotary_dim() == 64);
  CHECK(b4.tie_word_embeddings);
  Qwen35Config b27 = preset("qwen3.5-27b");
  CHECK(b27.num_linear_attention() == 48);
  CHECK(b27.num_full_attention() == 16);
  CHECK(b27.gdn.C() == 10240);
  CHECK_FALSE(b27.tie_word_embeddings);
  Qwen35Config tiny = preset("tiny");
  CHECK(tiny.layers == 6);
  using L = LayerType;
  const std::vector<LayerType> pattern = {L::linear_attention, L::linear_attention, L::full_attention,
                                          L::linear_attention, L::linear_attention, L::full_attention};
  CHECK(tiny.layer_types == pattern);
  CHECK(tiny.gdn.Hk == 2);
  CHECK(tiny.gdn.Hv == 4);
  CHECK(tiny.gdn.Dk == 32);
  CHECK(tiny.gdn.Dv == 32);
  CHECK(tiny.gdn.K == 4);
  Qwen35Config dkdv = preset("tiny-dkdv");
  CHECK(dkdv.gdn.Dk != dkdv.gdn.Dv);
  CHECK(dkdv.gdn.Hv == 3 * dkdv.gdn.Hk);
  CHECK(dkdv.layer_types == pattern);
  expect_error([] { preset("qwen3.5-9b"); }, {"qwen3.5-9b", "qwen3.5-4b", "tiny-dkdv"});
}

TEST_CASE("presets: validate catches inconsistent configs", "[models][config]") {
  Qwen35Config c = preset("tiny");
  SECTION("layer_types length") {
    c.layer_types.pop_back();
    expect_error([&] { c.validate("here"); }, {"here", "layer_types", "5 entries"});
  }
  SECTION("Hv not a multiple of Hk") {
    c.gdn.Hv = 3;
    expect_error([&] { c.validate("here"); }, {"here", "multiple"});
  }
  SECTION("zero size") {
    c.gdn.K = 0;
    expect_error([&] { c.validate("here"); }, {"here", "linear_conv_kernel_dim"});
  }
  CHECK(layer_type_name(LayerType::full_attention) == "full_attention");
  CHECK(layer_type_name(LayerType::linear_attention) == "linear_attention");
}
