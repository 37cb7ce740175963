// random.cpp: seeded random inputs.
#include "tests/support/random.h"

#include <cstring>

namespace sg::test {

std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> uniform_bf16(size_t n, uint64_t seed, float lo, float hi) {
  auto v = uniform(n, seed, lo, hi);
  for (auto& x : v) x = round_bf16(x);
  return v;
}

std::vector<bf16_t> to_bf16(const std::vector<float>& v) {
  std::vector<bf16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}

std::vector<float> from_bf16(const std::vector<bf16_t>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_f32(v[i]);
  return o;
}

}  // namespace sg::test

namespace sg::test {
std::vector<uint8_t> to_bytes_bf16(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    bf16_t b = f32_to_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &b.bits, 2);
  }
  return out;
}
}  // namespace sg::test
