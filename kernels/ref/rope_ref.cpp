// rope_ref.cpp: partial "rotate half" rotary embedding in f32, HF's arithmetic (see rope_ref.h).
#include "kernels/ref/rope_ref.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace sg::ref {
namespace {

constexpr int64_t kMaxExactPosition = int64_t{1} << 24;  // float(pos) is exact below this

void check_rotary_dim(int rotary_dim, double theta) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0) {
    throw std::invalid_argument(fmt::format("rope: rotary_dim ({}) must be a positive even number", rotary_dim));
  }
  if (!(theta > 0.0) || !std::isfinite(theta)) {
    throw std::invalid_argument(fmt::format("rope: theta ({}) must be finite and > 0", theta));
  }
}

}  // namespace

std::vector<float> rope_inv_freq(int rotary_dim, double theta) {
  check_rotary_dim(rotary_dim, theta);
  const float base = static_cast<float>(theta);
  const int half = rotary_dim / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv_freq[i] = 1.0f / std::pow(base, exponent);
  }
  return inv_freq;
}

void rope(float* x, const int64_t* positions, int64_t T, int H, int D, int rotary_dim, double theta, Store out) {
  if (T <= 0 || H <= 0 || D <= 0) {
    throw std::invalid_argument(fmt::format("rope: T ({}), H ({}) and D ({}) must be > 0", T, H, D));
  }
  check_rotary_dim(rotary_dim, theta);
  if (rotary_dim > D) {
    throw std::invalid_argument(fmt::format("rope: rotary_dim ({}) must be <= head dim D ({})", rotary_dim, D));
  }
  if (!x || !positions) throw std::invalid_argument("rope: null pointer argument");

  const std::vector<float> inv_freq = rope_inv_freq(rotary_dim, theta);
  const int half = rotary_dim / 2;
  std::vector<float> cos_a(half), sin_a(half);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = positions[t];
    if (pos < 0 || pos >= kMaxExactPosition) {
      throw std::invalid_argument(fmt::format("rope: position {} of token {} is outside [0, 2^24)", pos, t));
    }
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq[i];
      cos_a[i] = std::cos(angle);
      sin_a[i] = std::sin(angle);
    }
    for (int h = 0; h < H; ++h) {
      float* v = x + (t * H + h) * D;
      for (int i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        v[i] = store(a * cos_a[i] - b * sin_a[i], out);
        v[i + half] = store(b * cos_a[i] + a * sin_a[i], out);
      }
      // Pass-through features are left as they are, but still obey the output rounding.
      for (int i = rotary_dim; i < D; ++i) v[i] = store(v[i], out);
    }
  }
}

}  // namespace sg::ref
