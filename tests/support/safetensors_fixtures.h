// safetensors_fixtures.h: helpers shared by the safetensors and checkpoint tests
// (tests/cpu/test_safetensors*.cpp): a self-deleting temporary folder, raw bytes of a vector, file
// writers, a hand-built safetensors image, expect_error() for sg::Error messages, and a small valid
// set of tensors covering every dtype. Header-only.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "engine/error.h"
#include "models/safetensors.h"
#include "tests/support/catch.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

namespace sg::test {

template <typename T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

inline void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// A safetensors image with the given header text (not padded) and data section.
inline std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

// A small valid file's tensors: every readable dtype, a scalar, an empty tensor, an I64.
inline std::vector<SafetensorsTensor> sample_tensors() {
  std::vector<float> f32 = {1.f,
                            -2.5f,
                            0.f,
                            -0.f,
                            3.0e-39f /* subnormal */,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(),
                            1e-45f};
  std::vector<uint16_t> bf16 = {0x3f80, 0xc020, 0x0000, 0x8000, 0x0001, 0x7f80, 0xff80, 0x7fc0, 0x7f7f, 0x3c23};
  std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x0000, 0x8000, 0x0001, 0x03ff, 0x0400,
                               0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x8001, 0x3555, 0x7d01};
  return {
      {"a.f32", DType::f32, {2, 5}, raw(f32)}, {"b.bf16", DType::bf16, {10}, raw(bf16)},
      {"c.f16", DType::f16, {2, 7}, raw(f16)}, {"d.scalar", DType::f32, {}, raw(std::vector<float>{42.f})},
      {"e.empty", DType::bf16, {0, 3}, {}},    {"f.i32", DType::i32, {3}, raw(std::vector<int32_t>{1, -2, 3})},
  };
}

}  // namespace sg::test
