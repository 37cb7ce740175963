// FastDiv (kernels/fast_div.h), which the norm kernels split their flat row index with: floor(n / d)
// and n mod d equal plain division for every divisor up to 4096 over every n up to 2^16 and the n
// next to each multiple of d up to 2^31 - 1, for divisors near powers of two and the largest ones,
// and at the ends of the index range.
#include <cstdint>
#include <vector>

#include "kernels/fast_div.h"
#include "tests/support/catch.h"

using sg::FastDiv;

namespace {

// Counts the n in `ns` where FastDiv(d) differs from plain division (quotient or remainder).
int mismatches(uint32_t d, const std::vector<uint32_t>& ns) {
  const FastDiv f(d);
  int bad = 0;
  for (const uint32_t n : ns) {
    const uint32_t q = f.div(n);
    if (q != n / d || f.mod(n, q) != n % d) ++bad;
  }
  return bad;
}

// n around multiples of d spread over [0, 2^31): k d - 1, k d, k d + 1 for k at 64 points, and the
// top of the range.
std::vector<uint32_t> around_multiples(uint32_t d) {
  std::vector<uint32_t> ns;
  constexpr uint32_t kMax = 0x7fffffffu;
  const uint64_t kmax = kMax / d;
  for (uint64_t i = 0; i <= 64; ++i) {
    const uint64_t k = kmax * i / 64;
    for (int64_t off = -1; off <= 1; ++off) {
      const int64_t n = static_cast<int64_t>(k * d) + off;
      if (n >= 0 && n <= kMax) ns.push_back(static_cast<uint32_t>(n));
    }
  }
  for (uint32_t n = kMax - 4; n != 0x80000000u; ++n) ns.push_back(n);
  return ns;
}

}  // namespace

TEST_CASE("fast_div: every divisor up to 4096 over every n below 2^16 and near multiples up to 2^31 - 1",
          "[fast_div]") {
  std::vector<uint32_t> small(1u << 16);
  for (uint32_t n = 0; n < small.size(); ++n) small[n] = n;
  for (uint32_t d = 1; d <= 4096; ++d) {
    CAPTURE(d);
    REQUIRE(mismatches(d, small) == 0);
    REQUIRE(mismatches(d, around_multiples(d)) == 0);
  }
}

TEST_CASE("fast_div: divisors next to powers of two and the largest divisors", "[fast_div]") {
  std::vector<uint32_t> ds;
  for (int b = 12; b <= 31; ++b) {
    const uint64_t pw = uint64_t{1} << b;
    for (int64_t off = -3; off <= 3; ++off) {
      const int64_t d = static_cast<int64_t>(pw) + off;
      if (d >= 1 && d <= 0x7fffffff) ds.push_back(static_cast<uint32_t>(d));
    }
  }
  ds.push_back(0x7fffffffu);
  ds.push_back(1000003u);
  for (const uint32_t d : ds) {
    CAPTURE(d);
    REQUIRE(mismatches(d, around_multiples(d)) == 0);
  }
}

TEST_CASE("fast_div: a divisor of 1 gives n itself and remainder 0", "[fast_div]") {
  const FastDiv f(1);
  for (const uint32_t n : {0u, 1u, 12345u, 0x7ffffffeu, 0x7fffffffu}) {
    CHECK(f.div(n) == n);
    CHECK(f.mod(n, f.div(n)) == 0u);
  }
  const FastDiv def;
  CHECK(def.div(0x7fffffffu) == 0x7fffffffu);
}
