// CPU fuzz tests of the safetensors reader and of checkpoint index files (models/safetensors.h),
// part 3: seeded mutations of a valid file (bit flips, truncation, header length, JSON edits, spans)
// and of a sharded checkpoint's index must either open and read fully or throw sg::Error.
// Helpers: tests/support/safetensors_fixtures.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
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
  const std::vector<json> odd_values = {json(nullptr),
                                        json(-1),
                                        json(0),
                                        json(1),
                                        json(3),
                                        json(1ULL << 63),
                                        json(~0ULL),
                                        json(1.5),
                                        json("F32"),
                                        json("BF16"),
                                        json("F16"),
                                        json("I64"),
                                        json("F8_E4M3"),
                                        json("NOPE"),
                                        json::array(),
                                        json::array({0}),
                                        json::array({0, 4}),
                                        json::array({4, 0}),
                                        json::array({1, 2, 3}),
                                        json::object(),
                                        json(true),
                                        json::array({~0ULL - 3, ~0ULL})};
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
        case 5:
          h["extra" + std::to_string(uni(0, 3))] = {
              {"dtype", "F32"}, {"shape", {uni(0, 8)}}, {"data_offsets", {uni(0, 64), uni(0, 200)}}};
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
          for (uint64_t i = 0, n = uni(1, 8); i < n && !m.empty(); ++i)
            m[uni(0, m.size() - 1)] ^= uint8_t(1u << uni(0, 7));
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
      json{
          {"metadata", {{"total_size", 8}}},
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
  CHECK(opened > 0);
  CHECK(rejected > 0);
}
