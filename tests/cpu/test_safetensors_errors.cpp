// CPU tests of the safetensors reader and of checkpoint folders (models/safetensors.h), part 2:
// malformed inputs. Missing or ambiguous checkpoint folders and names, and every malformed file
// (truncations, bad header lengths, bad JSON, bad entries, offsets, dtypes and shapes, overlaps) must
// be an sg::Error naming the file and the tensor. Helpers: tests/support/safetensors_fixtures.h.
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/safetensors.h"
#include "tests/support/catch.h"
#include "tests/support/safetensors_fixtures.h"

using namespace sg;
using namespace sg::test;
namespace fs = std::filesystem;

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
    check_open(one(R"({"dtype":"F32","shape":[4],"data_offsets":[8,24]})"),
               {"'w'", "[8, 24]", "past the data section"});
    check_open(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,18446744073709551615]})"),
               {"'w'", "[0, 18446744073709551615] run past the data section"});
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
    write_bytes(
        file,
        image(R"({"__metadata__": [1, {"x": 2}], "w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}   )", data16));
    CHECK(SafetensorsFile::open(file).names() == std::vector<std::string>{"w"});
  }
  SECTION("not a regular file") {
    expect_error([&] { SafetensorsFile::open(dir.path); }, {dir.path.string(), "not a regular file"});
    expect_error([&] { SafetensorsFile::open(dir.path / "nope.safetensors"); },
                 {(dir.path / "nope.safetensors").string(), "cannot open"});
  }
}
