// CPU tests of the safetensors reader and writer and of checkpoint folders (models/safetensors.h):
// round trips per dtype, f16 conversion, sharded checkpoints, name normalisation, every malformed
// input, and a seeded fuzz test (mutated files must open and read, or throw sg::Error).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "models/half.h"
#include "models/safetensors.h"
#include "tests/support/catch.h"

using namespace sg;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    std::random_device rd;
    path = fs::temp_directory_path() / ("sg_test_safetensors_" + std::to_string(rd()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

template <typename T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

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

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// A safetensors image with the given header text (not padded) and data section.
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

// Runs f, which must throw sg::Error whose message contains every needle.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    FAIL("expected an sg::Error");
  } catch (const Error& e) {
    const std::string w = e.what();
    INFO("message: " << w);
    for (const auto& n : needles) {
      INFO("expected to find: " << n);
      CHECK(w.find(n) != std::string::npos);
    }
  }
}

// The value of an f16 bit pattern computed independently of f16_to_f32 (ldexp on the fields).
double f16_reference(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  return sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
}

// A small valid file's tensors: every readable dtype, a scalar, an empty tensor, an I64.
std::vector<SafetensorsTensor> sample_tensors() {
  std::vector<float> f32 = {1.f, -2.5f, 0.f, -0.f, 3.0e-39f /* subnormal */, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(), 1e-45f};
  std::vector<uint16_t> bf16 = {0x3f80, 0xc020, 0x0000, 0x8000, 0x0001, 0x7f80, 0xff80, 0x7fc0, 0x7f7f, 0x3c23};
  std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff,
                               0x7c00, 0xfc00, 0x7e00, 0x8001, 0x3555, 0x7d01};
  return {
      {"a.f32", DType::f32, {2, 5}, raw(f32)},
      {"b.bf16", DType::bf16, {10}, raw(bf16)},
      {"c.f16", DType::f16, {2, 7}, raw(f16)},
      {"d.scalar", DType::f32, {}, raw(std::vector<float>{42.f})},
      {"e.empty", DType::bf16, {0, 3}, {}},
      {"f.i32", DType::i32, {3}, raw(std::vector<int32_t>{1, -2, 3})},
  };
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
    CHECK(v[4] == std::ldexp(1.f, -24));   // smallest subnormal
    CHECK(v[5] == std::ldexp(1023.f, -24));  // largest subnormal
    CHECK(v[6] == std::ldexp(1.f, -14));   // smallest normal
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
    json mm = {{"weight_map",
                {{"model.language_model.layers.0.mlp.up_proj.weight", "s.safetensors"},
                 {"model.visual.x", "s.safetensors"}}}};
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

TEST_CASE("checkpoint: folder and name errors", "[models][safetensors]") {
  TempDir dir;
  expect_error([&] { Checkpoint::open(dir.path); }, {dir.path.string(), "no model.safetensors"});
  expect_error([&] { Checkpoint::open(dir.path / "absent"); }, {(dir.path / "absent").string()});
  // Two stored names that are the same text-model tensor.
  const std::vector<float> v = {1};
  write_safetensors(dir.path / "model.safetensors", {{"model.language_model.norm.weight", DType::f32, {1}, raw(v)},
                                                     {"model.norm.weight", DType::f32, {1}, raw(v)}});
  expect_error([&] { Checkpoint::open(dir.path); },
               {(dir.path / "model.safetensors").string(), "model.language_model.norm.weight", "'model.norm.weight'"});
}

TEST_CASE("safetensors: malformed files are errors naming the file and the tensor", "[models][safetensors]") {
  TempDir dir;
  const fs::path file = dir.path / "bad.safetensors";
  const std::string F = file.string();
  auto check_open = [&](const std::vector<uint8_t>& bytes, std::vector<std::string> needles) {
    write_bytes(file, bytes);
    needles.push_back(F);
    expect_error([&] { SafetensorsFile::open(file); }, needles);
    expect_error([&] { Checkpoint::open(file); }, needles);
  };
  const std::vector<uint8_t> data16(16, 0);
  auto one = [&](const std::string& entry) { return image("{\"w\": " + entry + "}", data16); };

  SECTION("empty and truncated before the header length") {
    check_open({}, {"0 bytes", "too short"});
    check_open({1, 0, 0}, {"3 bytes", "too short"});
  }
  SECTION("truncated data section") {
    const auto good = safetensors_bytes(sample_tensors());
    const std::vector<uint8_t> cut(good.begin(), good.end() - 5);
    check_open(cut, {"'f.i32'", "past the data section", "truncated"});
  }
  SECTION("truncated header") {
    auto good = safetensors_bytes(sample_tensors());
    good.resize(40);
    check_open(good, {"header length", "past the end of the file"});
  }
  SECTION("header length past EOF") {
    auto b = one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})");
    const uint64_t n = b.size();  // 8 more than available
    std::memcpy(b.data(), &n, 8);
    check_open(b, {"header length", "past the end"});
  }
  SECTION("absurd header length") {
    std::vector<uint8_t> b(64, ' ');
    const uint64_t n = 1ULL << 62;
    std::memcpy(b.data(), &n, 8);
    check_open(b, {"header length", "limit"});
  }
  SECTION("header not JSON") {
    check_open(image("not json at all", data16), {"not valid JSON"});
    check_open(image("{\"w\": {\"dtype\": \"F32\",", data16), {"not valid JSON"});
    check_open(image("", data16), {"not valid JSON"});
  }
  SECTION("header JSON but not an object") { check_open(image("[1, 2, 3]", data16), {"not a JSON object"}); }
  SECTION("header nested too deep") {
    check_open(image("{\"w\": " + std::string(50, '[') + std::string(50, ']') + "}", data16), {"nests deeper"});
  }
  SECTION("entry not an object") { check_open(one("[1]"), {"'w'", "not an object"}); }
  SECTION("missing field") { check_open(one(R"({"dtype":"F32","shape":[4]})"), {"'w'", "data_offsets"}); }
  SECTION("offsets out of range") {
    check_open(one(R"({"dtype":"F32","shape":[4],"data_offsets":[8,24]})"), {"'w'", "[8, 24]", "past the data section"});
    check_open(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,18446744073709551615]})"), {"'w'"});
  }
  SECTION("offsets reversed") {
    check_open(one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), {"'w'", "end before they begin"});
  }
  SECTION("offsets negative or not integers") {
    check_open(one(R"({"dtype":"F32","shape":[4],"data_offsets":[-16,0]})"), {"'w'", "non-negative integers"});
    check_open(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0.0,16]})"), {"'w'", "non-negative integers"});
    check_open(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0]})"), {"'w'", "non-negative integers"});
  }
  SECTION("size mismatch") {
    check_open(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,16]})"), {"'w'", "16 bytes", "needs 12"});
    check_open(one(R"({"dtype":"BF16","shape":[4],"data_offsets":[0,16]})"), {"'w'", "BF16", "needs 8"});
  }
  SECTION("unknown dtype") {
    check_open(one(R"({"dtype":"Q4_K","shape":[4],"data_offsets":[0,16]})"), {"'w'", "unknown dtype 'Q4_K'"});
    check_open(one(R"({"dtype":7,"shape":[4],"data_offsets":[0,16]})"), {"'w'", "dtype"});
  }
  SECTION("bad shapes") {
    check_open(one(R"({"dtype":"F32","shape":[-4],"data_offsets":[0,16]})"), {"'w'", "shape"});
    check_open(one(R"({"dtype":"F32","shape":"4","data_offsets":[0,16]})"), {"'w'", "shape"});
    check_open(one(R"({"dtype":"F32","shape":[2.0,2],"data_offsets":[0,16]})"), {"'w'", "shape"});
    check_open(one(R"({"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,16]})"),
               {"'w'", "too large"});
    check_open(one(R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,16]})"), {"'w'", "shape"});
  }
  SECTION("overlapping tensors") {
    check_open(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     data16),
               {"'b'", "overlaps tensor 'a'"});
  }
  SECTION("unsupported but valid dtype opens and refuses conversion") {
    write_bytes(file, one(R"({"dtype":"I64","shape":[2],"data_offsets":[0,16]})"));
    SafetensorsFile f = SafetensorsFile::open(file);
    CHECK(f.info("w").dtype_name == "I64");
    CHECK_FALSE(f.info("w").dtype.has_value());
    CHECK(f.bytes("w").size() == 16);
    expect_error([&] { f.read_f32("w"); }, {F, "'w'", "I64"});
  }
  SECTION("__metadata__ of any shape is ignored, and so is padding") {
    write_bytes(file, image(R"({"__metadata__": [1, {"x": 2}], "w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}   )",
                            data16));
    CHECK(SafetensorsFile::open(file).names() == std::vector<std::string>{"w"});
  }
  SECTION("not a regular file") {
    expect_error([&] { SafetensorsFile::open(dir.path); }, {dir.path.string(), "not a regular file"});
    expect_error([&] { SafetensorsFile::open(dir.path / "nope.safetensors"); },
                 {(dir.path / "nope.safetensors").string(), "cannot open"});
  }
}

// Reads everything a successfully opened file lists (any out-of-bounds read is a crash or an ASan
// report). Returns a checksum so the reads cannot be optimised away.
static double read_everything(const SafetensorsFile& f) {
  double sum = 0;
  for (const auto& name : f.names()) {
    const TensorInfo& t = f.info(name);
    REQUIRE(t.end >= t.begin);
    for (uint8_t b : f.bytes(name)) sum += b;
    if (t.is_float()) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      f.read_f32(name, v.data());
      std::vector<bf16_t> w(v.size());
      f.read_bf16(name, w.data());
      for (float x : v) sum += std::isfinite(x) ? 0.0 : 1.0;
    } else {
      CHECK_THROWS_AS(f.read_f32(name), Error);
    }
  }
  return sum;
}

TEST_CASE("safetensors fuzz: mutated files open and read, or throw sg::Error", "[models][safetensors][fuzz]") {
  const uint64_t seed = 20240611;
  const int iterations = 6000;
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  auto uni = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };

  auto tensors = sample_tensors();
  tensors.push_back({"g.more", DType::i32, {2, 2}, raw(std::vector<int32_t>{7, 8, 9, 10})});
  const std::vector<uint8_t> base = safetensors_bytes(tensors);
  uint64_t base_n;
  std::memcpy(&base_n, base.data(), 8);
  const std::string base_header(reinterpret_cast<const char*>(base.data() + 8), base_n);
  const std::vector<uint8_t> base_data(base.begin() + 8 + static_cast<long>(base_n), base.end());

  // JSON-level edit of one random tensor entry (or the header as a whole).
  const std::vector<json> odd_values = {json(nullptr),   json(-1),          json(0),        json(1),
                                        json(3),         json(1ULL << 63),  json(~0ULL),    json(1.5),
                                        json("F32"),     json("BF16"),      json("F16"),    json("I64"),
                                        json("F8_E4M3"), json("NOPE"),      json::array(),  json::array({0}),
                                        json::array({0, 4}), json::array({4, 0}), json::array({1, 2, 3}),
                                        json::object(),  json(true),        json::array({~0ULL - 3, ~0ULL})};
  auto json_edit = [&](std::vector<uint8_t>& img) {
    json h = json::parse(base_header);
    std::vector<std::string> keys;
    for (auto it = h.begin(); it != h.end(); ++it) keys.push_back(it.key());
    const std::string& k = keys[uni(0, keys.size() - 1)];
    const char* fields[] = {"dtype", "shape", "data_offsets"};
    const int edits = static_cast<int>(uni(1, 3));
    for (int e = 0; e < edits; ++e) {
      switch (uni(0, 6)) {
        case 0:
          if (!h[k].is_object()) h[k] = json::object();
          h[k][fields[uni(0, 2)]] = odd_values[uni(0, odd_values.size() - 1)];
          break;
        case 1:
          if (h[k].is_object()) h[k].erase(fields[uni(0, 2)]);
          break;
        case 2: {  // shift offsets by a small amount
          if (h[k].is_object() && h[k].contains("data_offsets") && h[k]["data_offsets"].is_array() &&
              h[k]["data_offsets"].size() == 2 && h[k]["data_offsets"][0].is_number_unsigned()) {
            const int64_t d = static_cast<int64_t>(uni(0, 16)) - 8;
            const size_t which = uni(0, 1);
            const int64_t v = static_cast<int64_t>(h[k]["data_offsets"][which].get<uint64_t>()) + d;
            h[k]["data_offsets"][which] = v;
          }
          break;
        }
        case 3:
          if (h[k].is_object() && h[k].contains("shape") && h[k]["shape"].is_array()) {
            h[k]["shape"].push_back(uni(0, 3));
          }
          break;
        case 4: h[k] = odd_values[uni(0, odd_values.size() - 1)]; break;
        case 5: h["extra" + std::to_string(uni(0, 3))] = {{"dtype", "F32"}, {"shape", {uni(0, 8)}},
                                                          {"data_offsets", {uni(0, 64), uni(0, 200)}}};
          break;
        default: h.erase(k); break;
      }
      if (h.empty()) break;
    }
    img = image(h.dump(), base_data);
  };

  int opened = 0, rejected = 0;
  double checksum = 0;
  TempDir dir;
  for (int it = 0; it < iterations; ++it) {
    std::vector<uint8_t> m = base;
    const int kind = static_cast<int>(uni(0, 7));
    const int rounds = static_cast<int>(uni(1, 3));
    for (int r = 0; r < rounds; ++r) {
      switch (r == 0 ? kind : static_cast<int>(uni(0, 7))) {
        case 0:  // flip bits anywhere
          for (uint64_t i = 0, n = uni(1, 8); i < n && !m.empty(); ++i) m[uni(0, m.size() - 1)] ^= uint8_t(1u << uni(0, 7));
          break;
        case 1:  // random bytes inside the header
          for (uint64_t i = 0, n = uni(1, 4); i < n && m.size() > 8; ++i) {
            m[uni(8, std::min<uint64_t>(m.size() - 1, 8 + base_n))] = static_cast<uint8_t>(uni(0, 255));
          }
          break;
        case 2:  // truncate
          m.resize(uni(0, m.size()));
          break;
        case 3: {  // header length: small change, or anything
          if (m.size() >= 8) {
            uint64_t n;
            std::memcpy(&n, m.data(), 8);
            n = uni(0, 1) ? n + uni(0, 64) - 32 : rng();
            std::memcpy(m.data(), &n, 8);
          }
          break;
        }
        case 4:
        case 5: json_edit(m); break;
        case 6: {  // delete or duplicate a span of the header text
          if (m.size() > 16) {
            const uint64_t a = uni(8, m.size() - 2), len = uni(1, 16);
            const uint64_t b = std::min<uint64_t>(a + len, m.size());
            if (uni(0, 1)) {
              m.erase(m.begin() + static_cast<long>(a), m.begin() + static_cast<long>(b));
            } else {
              std::vector<uint8_t> span(m.begin() + static_cast<long>(a), m.begin() + static_cast<long>(b));
              m.insert(m.begin() + static_cast<long>(a), span.begin(), span.end());
            }
          }
          break;
        }
        default:  // append garbage
          for (uint64_t i = 0, n = uni(1, 32); i < n; ++i) m.push_back(static_cast<uint8_t>(rng()));
          break;
      }
    }
    CAPTURE(it);
    try {
      if (it % 20 == 0) {  // the memory-mapped path too
        const fs::path p = dir.path / "fuzz.safetensors";
        write_bytes(p, m);
        checksum += read_everything(SafetensorsFile::open(p));
        Checkpoint c = Checkpoint::open(p);
        for (const auto& name : c.names()) {
          if (c.info(name).is_float()) checksum += static_cast<double>(c.read_f32(name).size());
        }
      } else {
        checksum += read_everything(SafetensorsFile::from_bytes(std::move(m), "fuzz"));
      }
      ++opened;
    } catch (const Error&) {
      ++rejected;
    }
  }
  INFO("opened " << opened << ", rejected " << rejected << ", checksum " << checksum);
  CHECK(opened + rejected == iterations);
  // Both outcomes must be common, or the mutations are not exercising the checks.
  CHECK(opened > iterations / 20);
  CHECK(rejected > iterations / 4);
  fmt::print("safetensors fuzz: {} mutated files, {} opened and fully read, {} rejected with sg::Error\n", iterations,
             opened, rejected);
}

TEST_CASE("checkpoint fuzz: mutated index files open or throw sg::Error", "[models][safetensors][fuzz]") {
  const uint64_t seed = 77;
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  TempDir dir;
  write_safetensors(dir.path / "s1.safetensors", {{"model.a", DType::f32, {1}, raw(std::vector<float>{1})}});
  write_safetensors(dir.path / "s2.safetensors", {{"model.b", DType::f32, {1}, raw(std::vector<float>{2})}});
  const std::string index =
      json{{"metadata", {{"total_size", 8}}},
           {"weight_map", {{"model.a", "s1.safetensors"}, {"model.b", "s2.safetensors"}, {"visual.c", "v.safetensors"}}}}
          .dump();
  int opened = 0, rejected = 0;
  for (int it = 0; it < 400; ++it) {
    std::string s = index;
    for (int r = 0, n = static_cast<int>(rng() % 4) + 1; r < n && !s.empty(); ++r) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = static_cast<char>(rng() % 128); break;
        case 1: s.erase(at, rng() % 8); break;
        default: {
          const char* alphabet = "{}[]\",:0a.";
          s.insert(s.begin() + static_cast<long>(at), alphabet[rng() % 10]);
          break;
        }
      }
    }
    write_text(dir.path / "model.safetensors.index.json", s);
    CAPTURE(it, s);
    try {
      Checkpoint c = Checkpoint::open(dir.path);
      for (const auto& name : c.names()) (void)c.read_f32(name);
      ++opened;
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(opened + rejected == 400);
  CHECK(opened > 0);
  CHECK(rejected > 0);
}
