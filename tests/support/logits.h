// logits.h: helpers for comparing greedy tokens of two implementations. Header-only.
#pragma once
#include <cmath>
#include <cstdint>

namespace sg::test {

// Top-1 minus top-2 of a row of n values: a greedy token may differ between two implementations
// only where this margin is within their error bound.
inline float top2_margin(const float* x, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > a) {
      b = a;
      a = x[i];
    } else if (x[i] > b) {
      b = x[i];
    }
  }
  return a - b;
}

}  // namespace sg::test
