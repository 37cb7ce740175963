// tolerance.h: the two normalised error metrics the tests compare results with, named apart (they
// bound different things, so a tolerance written for one does not hold for the other):
//   max_normalised_error  max |a - b| / max |b|: a worst element against the largest reference
//                         value (logits of the model step against the CPU reference or HF);
//   l2_normalised_error   ||a - b||_2 / ||b||_2: an average over the whole tensor (the delta rule's
//                         chunked forms against the recurrence, as bounded in delta_rule_ref.h).
// Both return the unscaled error when b is all zero, and infinity when any difference is not
// finite, so a NaN or Inf in a result always fails a comparison (it never hides in a max or sum).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace sg::test {

inline double max_normalised_error(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    num = std::max(num, d);
    den = std::max(den, std::fabs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

// Over the common length of a and b.
inline double max_normalised_error(const std::vector<float>& a, const std::vector<float>& b) {
  return max_normalised_error(a.data(), b.data(), std::min(a.size(), b.size()));
}

inline double l2_normalised_error(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (!std::isfinite(num)) return std::numeric_limits<double>::infinity();
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace sg::test
