// CPU tests of the safetensors reader and writer and of checkpoint folders (models/safetensors.h),
// part 1: exact f16 conversion, writer/reader round trips per dtype, the writer's byte layout, text
// model name normalisation, and checkpoint layouts (one multimodal file, sharded with an index,
// including the index's own errors). Malformed inputs: test_safetensors_errors.cpp; the seeded fuzz
// tests: test_safetensors_fuzz.cpp; shared helpers: tests/support/safetensors_fixtures.h.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "models/half.h"
#include "models/safetensors.h"
#include "tests/support/catch.h"
#include "tests/support/safetensors_fixtures.h"

using namespace sg;
using namespace sg::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The value of an f16 bit pattern computed independently of f16_to_f32 (ldexp on the fields).
double f16_reference(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f)
    return mant ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  return sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
}

}  // namespace

TEST_CASE("f16 to f32 is exact for every bit pattern", "[models][safetensors]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const double ref = f16_reference(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      if (!std::isnan(f)) FAIL("f16 " << h << " should be NaN");
      continue;
    }
    if (static_cast<double>(f) != ref || std::signbit(f) != std::signbit(ref)) {
      FAIL("f16 0x" << std::hex << h << " gave " << f << ", expected " << ref);
    }
  }
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.f, -24));
  CHECK(f16_to_f32(0x03ff) == std::ldexp(1023.f, -24));
  CHECK(f16_to_f32(0x7bff) == 65504.f);
  CHECK(std::isinf(f16_to_f32(0xfc00)));
  CHECK(std::signbit(f16_to_f32(0x8000)));
}

TEST_CASE("safetensors: writer then reader round-trips every dtype", "[models][safetensors]") {
  TempDir dir;
  const auto tensors = sample_tensors();
  const fs::path file = dir.path / "model.safetensors";
  write_safetensors(file, tensors);

  SafetensorsFile f = SafetensorsFile::open(file);
  CHECK(f.origin() == file.string());
  CHECK(f.names() == std::vector<std::string>{"a.f32", "b.bf16", "c.f16", "d.scalar", "e.empty", "f.i32"});
  CHECK(f.size() == 6);

  SECTION("infos") {
    CHECK(f.info("a.f32").describe() == "F32 [2, 5]");
    CHECK(f.info("a.f32").dtype == DType::f32);
    CHECK(f.info("b.bf16").dtype == DType::bf16);
    CHECK(f.info("c.f16").dtype == DType::f16);
    CHECK(f.info("c.f16").numel() == 14);
    CHECK(f.info("c.f16").nbytes() == 28);
    CHECK(f.info("d.scalar").shape.empty());
    CHECK(f.info("d.scalar").numel() == 1);
    CHECK(f.info("e.empty").numel() == 0);
    CHECK(f.info("f.i32").dtype == DType::i32);
    CHECK_FALSE(f.info("f.i32").is_float());
    for (const auto& [name, dtype, shape, data] : tensors) {
      INFO(name);
      auto b = f.bytes(name);
      REQUIRE(b.size() == data.size());
      CHECK(std::equal(b.begin(), b.end(), data.begin()));
    }
  }
  SECTION("f32 values, bit for bit") {
    auto v = f.read_f32("a.f32");
    const auto& src = std::get<3>(tensors[0]);
    REQUIRE(v.size() == 10);
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t want;
      std::memcpy(&want, src.data() + 4 * i, 4);
      CHECK(f32_bits(v[i]) == want);
    }
  }
  SECTION("bf16 values widen exactly") {
    auto v = f.read_f32("b.bf16");
    const std::vector<uint16_t> bits = {0x3f80, 0xc020, 0x0000, 0x8000, 0x0001, 0x7f80, 0xff80, 0x7fc0, 0x7f7f, 0x3c23};
    REQUIRE(v.size() == bits.size());
    for (size_t i = 0; i < v.size(); ++i) CHECK(f32_bits(v[i]) == static_cast<uint32_t>(bits[i]) << 16);
    CHECK(v[0] == 1.f);
    CHECK(std::isinf(v[5]));
    CHECK(std::isnan(v[7]));
    std::vector<bf16_t> back(v.size());
    f.read_bf16("b.bf16", back.data());
    for (size_t i = 0; i < v.size(); ++i) CHECK(back[i].bits == bits[i]);
  }
  SECTION("f16 values: subnormals, inf, NaN") {
    auto v = f.read_f32("c.f16");
    REQUIRE(v.size() == 14);
    CHECK(v[0] == 1.f);
    CHECK(v[1] == -2.f);
    CHECK(v[2] == 0.f);
    CHECK(std::signbit(v[3]));
    CHECK(v[4] == std::ldexp(1.f, -24));     // smallest subnormal
    CHECK(v[5] == std::ldexp(1023.f, -24));  // largest subnormal
    CHECK(v[6] == std::ldexp(1.f, -14));     // smallest normal
    CHECK(v[7] == 65504.f);
    CHECK(v[8] == std::numeric_limits<float>::infinity());
    CHECK(v[9] == -std::numeric_limits<float>::infinity());
    CHECK(std::isnan(v[10]));
    CHECK(v[11] == -std::ldexp(1.f, -24));
    CHECK(v[12] == Approx(1.f / 3.f).epsilon(1e-3));
    CHECK(std::isnan(v[13]));  // a signalling-pattern NaN stays a NaN
    std::vector<bf16_t> b(14);
    f.read_bf16("c.f16", b.data());
    for (size_t i = 0; i < v.size(); ++i) {
      INFO(i);
      if (std::isnan(v[i])) {
        CHECK(std::isnan(bf16_to_f32(b[i])));
      } else {
        CHECK(b[i].bits == f32_to_bf16(v[i]).bits);
      }
    }
  }
  SECTION("f32 to bf16 rounds to nearest even") {
    std::vector<bf16_t> b(10);
    f.read_bf16("a.f32", b.data());
    CHECK(b[0].bits == 0x3f80);
    CHECK(b[1].bits == 0xc020);
    CHECK(b[5].bits == 0x7f80);
    CHECK(std::isnan(bf16_to_f32(b[7])));
  }
  SECTION("scalar and empty tensors") {
    CHECK(f.read_f32("d.scalar") == std::vector<float>{42.f});
    CHECK(f.read_f32("e.empty").empty());
    CHECK(f.bytes("e.empty").empty());
  }
  SECTION("non-float dtypes are listed but not converted") {
    expect_error([&] { f.read_f32("f.i32"); }, {file.string(), "'f.i32'", "I32"});
    std::vector<bf16_t> b(3);
    expect_error([&] { f.read_bf16("f.i32", b.data()); }, {file.string(), "'f.i32'", "I32"});
  }
  SECTION("unknown names") {
    CHECK_FALSE(f.has("nope"));
    expect_error([&] { f.info("nope"); }, {file.string(), "'nope'"});
    expect_error([&] { f.read_f32("nope"); }, {file.string(), "'nope'"});
  }
  SECTION("an in-memory image reads the same") {
    SafetensorsFile m = SafetensorsFile::from_bytes(safetensors_bytes(tensors), "mem");
    CHECK(m.names() == f.names());
    CHECK(f32_bits(m.read_f32("c.f16")[5]) == f32_bits(f.read_f32("c.f16")[5]));
  }
  SECTION("copies share the mapping and outlive the original") {
    std::vector<float> want = f.read_f32("a.f32");
    SafetensorsFile copy = f;
    { SafetensorsFile moved = std::move(f); }
    CHECK(copy.read_f32("a.f32")[0] == want[0]);
  }
}

TEST_CASE("safetensors: the writer's layout matches the reference implementation", "[models][safetensors]") {
  const auto bytes = safetensors_bytes(sample_tensors());
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(bytes[8] == '{');
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), n);
  const json h = json::parse(header);  // trailing spaces are valid JSON whitespace
  CHECK(h["__metadata__"]["format"] == "pt");
  CHECK(h["a.f32"]["dtype"] == "F32");
  CHECK(h["a.f32"]["data_offsets"] == json::array({0, 40}));
  CHECK(h["b.bf16"]["data_offsets"] == json::array({40, 60}));
  CHECK(h["c.f16"]["shape"] == json::array({2, 7}));
  CHECK(h["f.i32"]["dtype"] == "I32");
  CHECK(header.find_last_not_of(' ') + 1 == header.find_last_of('}') + 1);
  CHECK(bytes.size() == 8 + n + 40 + 20 + 28 + 4 + 0 + 12);
  // Writer preconditions.
  CHECK_THROWS_AS(safetensors_bytes({{"x", DType::f32, {2}, std::vector<uint8_t>(4)}}), Error);
  CHECK_THROWS_AS(safetensors_bytes({{"x", DType::f32, {1}, std::vector<uint8_t>(4)},
                                     {"x", DType::f32, {1}, std::vector<uint8_t>(4)}}),
                  Error);
  CHECK_THROWS_AS(safetensors_bytes({{"__metadata__", DType::f32, {1}, std::vector<uint8_t>(4)}}), Error);
  // No metadata: no __metadata__ key.
  const auto plain = safetensors_bytes({{"x", DType::f32, {1}, std::vector<uint8_t>(4)}}, {});
  std::memcpy(&n, plain.data(), 8);
  CHECK(json::parse(std::string(reinterpret_cast<const char*>(plain.data() + 8), n)).size() == 1);
}

TEST_CASE("safetensors: text_model_name keeps the text model and drops the rest", "[models][safetensors]") {
  CHECK(text_model_name("model.language_model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight");
  CHECK(text_model_name("model.language_model.embed_tokens.weight") == "model.embed_tokens.weight");
  CHECK(text_model_name("model.layers.3.self_attn.q_proj.weight") == "model.layers.3.self_attn.q_proj.weight");
  CHECK(text_model_name("model.norm.weight") == "model.norm.weight");
  CHECK(text_model_name("lm_head.weight") == "lm_head.weight");
  CHECK_FALSE(text_model_name("model.visual.blocks.0.attn.qkv.weight"));
  CHECK_FALSE(text_model_name("visual.merger.mlp.0.weight"));
  CHECK_FALSE(text_model_name("mtp.layers.0.mlp.up_proj.weight"));
  CHECK_FALSE(text_model_name("model.vision_tower.x"));
  CHECK_FALSE(text_model_name("something_else"));
  CHECK_FALSE(text_model_name("model."));
}

TEST_CASE("checkpoint: one multimodal file, prefix normalised, vision and MTP ignored", "[models][safetensors]") {
  TempDir dir;
  const std::vector<float> emb = {1, 2, 3, 4, 5, 6};
  const std::vector<float> norm = {0.5f, -0.5f};
  write_safetensors(dir.path / "model.safetensors",
                    {{"model.language_model.embed_tokens.weight", DType::f32, {3, 2}, raw(emb)},
                     {"model.language_model.norm.weight", DType::f32, {2}, raw(norm)},
                     {"model.visual.blocks.0.norm1.weight", DType::f32, {2}, raw(norm)},
                     {"mtp.fc.weight", DType::f32, {2}, raw(norm)}});
  for (const fs::path& p : {dir.path, dir.path / "model.safetensors"}) {
    INFO("opened as " << p.string());
    Checkpoint c = Checkpoint::open(p);
    CHECK(c.names() == std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"});
    CHECK(c.ignored() == std::vector<std::string>{"model.visual.blocks.0.norm1.weight", "mtp.fc.weight"});
    CHECK(c.num_shards() == 1);
    CHECK(c.has("model.embed_tokens.weight"));
    CHECK_FALSE(c.has("model.language_model.embed_tokens.weight"));
    CHECK_FALSE(c.has("lm_head.weight"));  // tied: the caller uses the embedding
    CHECK_FALSE(c.has("model.visual.blocks.0.norm1.weight"));
    TensorInfo t = c.info("model.embed_tokens.weight");
    CHECK(t.name == "model.embed_tokens.weight");
    CHECK(t.shape == std::vector<int64_t>{3, 2});
    CHECK(c.stored_name("model.norm.weight") == "model.language_model.norm.weight");
    CHECK(c.file_of("model.norm.weight") == (dir.path / "model.safetensors").string());
    CHECK(c.read_f32("model.embed_tokens.weight") == emb);
    std::vector<float> n(2);
    c.read_f32("model.norm.weight", n.data());
    CHECK(n == norm);
    CHECK(c.bytes("model.norm.weight").size() == 8);
    expect_error([&] { c.info("lm_head.weight"); }, {p.string(), "'lm_head.weight'"});
  }
}

TEST_CASE("checkpoint: sharded with model.safetensors.index.json", "[models][safetensors]") {
  TempDir dir;
  const std::vector<float> a = {1, 2, 3, 4};
  const std::vector<uint16_t> b = {0x3f80, 0x4000};
  write_safetensors(dir.path / "model-00001-of-00002.safetensors",
                    {{"model.layers.0.mlp.up_proj.weight", DType::f32, {2, 2}, raw(a)},
                     {"model.embed_tokens.weight", DType::bf16, {1, 2}, raw(b)},
                     {"model.layers.0.unlisted", DType::f32, {1}, raw(std::vector<float>{0})}});
  write_safetensors(dir.path / "model-00002-of-00002.safetensors",
                    {{"model.layers.1.mlp.up_proj.weight", DType::f32, {2, 2}, raw(a)},
                     {"lm_head.weight", DType::bf16, {1, 2}, raw(b)}});
  json index = {{"metadata", {{"total_size", 48}}},
                {"weight_map",
                 {{"model.layers.0.mlp.up_proj.weight", "model-00001-of-00002.safetensors"},
                  {"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                  {"model.layers.1.mlp.up_proj.weight", "model-00002-of-00002.safetensors"},
                  {"lm_head.weight", "model-00002-of-00002.safetensors"},
                  // A vision shard that is not there: ignored tensors' shards are never opened.
                  {"model.visual.patch_embed.proj.weight", "model-vision.safetensors"}}}};
  const fs::path idx = dir.path / "model.safetensors.index.json";
  write_text(idx, index.dump(2));

  Checkpoint c = Checkpoint::open(dir.path);
  CHECK(c.num_shards() == 2);
  CHECK(c.names() == std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                              "model.layers.0.mlp.up_proj.weight",
                                              "model.layers.1.mlp.up_proj.weight"});
  CHECK(c.ignored() == std::vector<std::string>{"model.visual.patch_embed.proj.weight"});
  CHECK_FALSE(c.has("model.layers.0.unlisted"));  // the index is authoritative
  CHECK(c.read_f32("model.layers.1.mlp.up_proj.weight") == a);
  CHECK(c.read_f32("lm_head.weight") == std::vector<float>{1.f, 2.f});
  std::vector<bf16_t> e(2);
  c.read_bf16("model.embed_tokens.weight", e.data());
  CHECK(e[1].bits == 0x4000);
  CHECK(c.file_of("lm_head.weight") == (dir.path / "model-00002-of-00002.safetensors").string());
  CHECK(c.file_of("model.embed_tokens.weight") == (dir.path / "model-00001-of-00002.safetensors").string());

  SECTION("an index with the multimodal prefix") {
    json mm = {
        {"weight_map",
         {{"model.language_model.layers.0.mlp.up_proj.weight", "s.safetensors"}, {"model.visual.x", "s.safetensors"}}}};
    TempDir d2;
    write_safetensors(d2.path / "s.safetensors",
                      {{"model.language_model.layers.0.mlp.up_proj.weight", DType::f32, {2, 2}, raw(a)},
                       {"model.visual.x", DType::f32, {2, 2}, raw(a)}});
    write_text(d2.path / "model.safetensors.index.json", mm.dump());
    Checkpoint m = Checkpoint::open(d2.path);
    CHECK(m.names() == std::vector<std::string>{"model.layers.0.mlp.up_proj.weight"});
    CHECK(m.read_f32("model.layers.0.mlp.up_proj.weight") == a);
  }
  SECTION("missing shard") {
    index["weight_map"]["model.norm.weight"] = "model-00003-of-00002.safetensors";
    write_text(idx, index.dump());
    expect_error([&] { Checkpoint::open(dir.path); },
                 {idx.string(), "'model.norm.weight'", "model-00003-of-00002.safetensors", "does not exist"});
  }
  SECTION("index pointing to a tensor its shard lacks") {
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
    write_text(idx, index.dump());
    expect_error([&] { Checkpoint::open(dir.path); },
                 {idx.string(), "'model.norm.weight'", "model-00001-of-00002.safetensors", "does not hold it"});
  }
  SECTION("shard outside the folder") {
    index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
    write_text(idx, index.dump());
    expect_error([&] { Checkpoint::open(dir.path); }, {idx.string(), "'model.norm.weight'", "inside the checkpoint"});
  }
  SECTION("shard name not a string") {
    index["weight_map"]["model.norm.weight"] = 3;
    write_text(idx, index.dump());
    expect_error([&] { Checkpoint::open(dir.path); }, {idx.string(), "'model.norm.weight'"});
  }
  SECTION("index not JSON") {
    write_text(idx, "{\"weight_map\": {");
    expect_error([&] { Checkpoint::open(dir.path); }, {idx.string(), "not valid JSON"});
  }
  SECTION("index without weight_map") {
    write_text(idx, "{\"metadata\": {}}");
    expect_error([&] { Checkpoint::open(dir.path); }, {idx.string(), "weight_map"});
  }
  SECTION("a corrupt shard names the shard") {
    write_bytes(dir.path / "model-00002-of-00002.safetensors", {1, 2, 3});
    expect_error([&] { Checkpoint::open(dir.path); }, {"model-00002-of-00002.safetensors", "too short"});
  }
}
