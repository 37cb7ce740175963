// fast_div.h: division of a 31-bit index by a divisor fixed at launch, as one 64-bit multiply and a
// shift (the round-up method of Granlund and Montgomery), for kernels that split a flat row index
// into (token, head): a 32-bit division by a value known only at run time is a sequence of about 20
// instructions a thread, a 64-bit one several times that, and a bandwidth-bound kernel that does
// little else per element pays for them in issue slots.
//
// For a divisor d >= 1 with l = ceil(log2 d) and p = 31 + l, m = ceil(2^p / d) fits 32 bits, and for
// every 0 <= n < 2^31, floor(n m / 2^p) = floor(n / d): m = 2^p / d + e with 0 <= e < 1, so
// n m / 2^p = n / d + n e / 2^p, and n e / 2^p < 2^31 / 2^(31 + l) <= 1 / d, less than the gap from
// n / d up to the next multiple of 1 / d. Shared by the kernels (device) and the CPU tests
// (tests/cpu/test_fast_div.cpp, which check it against plain division).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define SG_FAST_DIV_FN __host__ __device__ inline
#else
#define SG_FAST_DIV_FN inline
#endif

namespace sg {

struct FastDiv {
  uint32_t d = 1;  // the divisor, 1 .. 2^31 - 1
  uint32_t m = 1u << 31;
  uint32_t p = 31;

  FastDiv() = default;
  SG_FAST_DIV_FN explicit FastDiv(uint32_t divisor) : d(divisor) {
    uint32_t l = 0;
    while ((uint64_t{1} << l) < divisor) ++l;
    p = 31 + l;
    m = static_cast<uint32_t>(((uint64_t{1} << p) + divisor - 1) / divisor);
  }
  // floor(n / d) for 0 <= n < 2^31.
  SG_FAST_DIV_FN uint32_t div(uint32_t n) const { return static_cast<uint32_t>((uint64_t{n} * m) >> p); }
  // n - floor(n / d) d, given q = div(n).
  SG_FAST_DIV_FN uint32_t mod(uint32_t n, uint32_t q) const { return n - q * d; }
};

}  // namespace sg
