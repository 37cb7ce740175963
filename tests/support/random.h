// random.h: seeded random inputs for tests. Every failing test prints its seed.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/numeric.h"

namespace sg::test {

// Uniform floats in [lo, hi), seeded.
std::vector<float> uniform(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
// Same, rounded to bf16-representable values (so bf16 storage loses nothing).
std::vector<float> uniform_bf16(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
std::vector<bf16_t> to_bf16(const std::vector<float>& v);
std::vector<float> from_bf16(const std::vector<bf16_t>& v);

}  // namespace sg::test

namespace sg::test {
// Raw bytes of values stored as bf16 (for byte-exact comparisons against device buffers).
std::vector<uint8_t> to_bytes_bf16(const std::vector<float>& v);
}  // namespace sg::test
