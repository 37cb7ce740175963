// norm_ref.h: CPU reference for the two RMSNorms of the model (docs/MODEL.md):
//   rmsnorm        zero-centred weight, y = x * rsqrt(mean(x^2) + eps) * (1 + w)
//                  (layer norms, final norm, attention q_norm / k_norm)
//   gated_rmsnorm  GDN output norm, y = w * (x * rsqrt(mean(x^2) + eps)) * silu(z), w used as is
// Plain loops, f32 math. Numeric choices (part of the reference's contract):
//   sum of squares: a plain sequential f32 sum, feature 0 first;  mean = sum / float(n);
//   rsqrt: inv = 1.0f / std::sqrt(mean + eps) (correctly rounded sqrt, then divide; not an
//   approximate rsqrt);  silu(z) = z / (1.0f + std::exp(-z)).
//   rmsnorm:       y = (x * inv) * (1.0f + w)           (HF's association)
//   gated_rmsnorm: y = (w * (x * inv)) * silu(z)        (contract order; HF additionally rounds
//                  x * inv to the activation dtype before the weight, we do not: f32 throughout)
// The result is rounded once with `out` (Store::bf16 rounds to nearest even bf16).
// y may alias x (each row's sum is taken before the row is written).
#pragma once
#include <cstdint>

#include "kernels/ref/ref_common.h"

namespace sg::ref {

// Zero-centred RMSNorm over the last dimension, row by row.
void rmsnorm(const float* x,  // [rows, n] row-major
             const float* w,  // [n] zero-centred weight (scale is 1 + w)
             float* y,        // [rows, n] row-major; may alias x
             int64_t rows, int n, float eps, Store out = Store::f32);

// GDN gated RMSNorm over the last dimension, row by row (a row = one (token, v-head) pair).
void gated_rmsnorm(const float* x,  // [rows, n] row-major
                   const float* z,  // [rows, n] row-major, the gate
                   const float* w,  // [n] weight, used as is
                   float* y,        // [rows, n] row-major; may alias x
                   int64_t rows, int n, float eps, Store out = Store::f32);

}  // namespace sg::ref
