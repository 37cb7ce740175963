// norm_ref.cpp: zero-centred RMSNorm and the GDN gated RMSNorm, plain f32 loops (see norm_ref.h).
#include "kernels/ref/norm_ref.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace sg::ref {
namespace {

void check_args(const char* op, const void* x, const void* w, const void* y, int64_t rows, int n, float eps) {
  if (rows <= 0 || n <= 0) {
    throw std::invalid_argument(fmt::format("{}: rows ({}) and n ({}) must be > 0", op, rows, n));
  }
  if (!x || !w || !y) throw std::invalid_argument(fmt::format("{}: null pointer argument", op));
  if (!(eps >= 0.f)) throw std::invalid_argument(fmt::format("{}: eps ({}) must be >= 0", op, eps));
}

// 1 / sqrt(mean(x^2) + eps) of one row: sequential f32 sum, correctly rounded sqrt and divide.
float inv_rms(const float* x, int n, float eps) {
  float sum = 0.f;
  for (int i = 0; i < n; ++i) sum += x[i] * x[i];
  const float mean = sum / static_cast<float>(n);
  return 1.0f / std::sqrt(mean + eps);
}

float silu(float z) { return z / (1.0f + std::exp(-z)); }

}  // namespace

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int n, float eps, Store out) {
  check_args("rmsnorm", x, w, y, rows, n, eps);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float inv = inv_rms(xr, n, eps);
    for (int i = 0; i < n; ++i) yr[i] = store((xr[i] * inv) * (1.0f + w[i]), out);
  }
}

void gated_rmsnorm(const float* x, const float* z, const float* w, float* y, int64_t rows, int n, float eps,
                   Store out) {
  check_args("gated_rmsnorm", x, w, y, rows, n, eps);
  if (!z) throw std::invalid_argument("gated_rmsnorm: null gate z");
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* zr = z + r * n;
    float* yr = y + r * n;
    const float inv = inv_rms(xr, n, eps);
    for (int i = 0; i < n; ++i) yr[i] = store((w[i] * (xr[i] * inv)) * silu(zr[i]), out);
  }
}

}  // namespace sg::ref
