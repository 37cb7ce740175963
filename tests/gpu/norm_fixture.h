// norm_fixture.h: the shared checks of the elementwise / norm kernels' GPU tests (test_norms.cpp,
// test_swiglu.cpp). Every output is poisoned with 0xFF (NaN in f32 and bf16, -1 in i32) and
// followed by a poisoned guard, so an element left unwritten fails its check and a write past the
// end is seen. Tolerances (got vs the reference rounded to the output dtype):
//   f32 outputs:  |got - ref| <= 1e-5 * |ref| + 1e-7
//   bf16 outputs: |got - ref| <= k * ulp_bf16(ref) + 1e-6, k = 1 (one rounding of an f32 value
//                 that differs from the reference by a few f32 ulps), k = 2 for swiglu with a
//                 bf16 activation (silu is rounded to bf16 before the product: two roundings)
//   byte-exact:   residual_out, embedding, argmax, and padding rows (+0.0 / id 0).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/tensor.h"
#include "kernels/ref/norm_ref.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

namespace sg::test::norms {

constexpr uint8_t kPoison = 0xFF;  // NaN as f32 and bf16
constexpr size_t kGuard = 64;      // poisoned elements after every output buffer
constexpr float kEps = 1e-6f;

inline ref::Store store_of(DType t) { return t == DType::bf16 ? ref::Store::bf16 : ref::Store::f32; }

inline std::vector<float> rnd(size_t n, uint64_t seed, DType t, float lo, float hi) {
  return t == DType::bf16 ? uniform_bf16(n, seed, lo, hi) : uniform(n, seed, lo, hi);
}

// A poisoned output of n elements of type t, plus the guard.
inline DevBuf out_buf(size_t n, DType t) { return DevBuf((n + kGuard) * dtype_size(t), kPoison); }

struct Got {
  std::vector<uint8_t> bytes;  // the first n elements
  std::vector<float> v;        // the same as f32
  bool guard_ok = true;        // the guard still holds the poison
};

inline Got fetch(const DevBuf& b, size_t n, DType t) {
  Got g;
  g.bytes = b.download();
  const size_t es = dtype_size(t);
  for (size_t i = n * es; i < g.bytes.size(); ++i) g.guard_ok = g.guard_ok && g.bytes[i] == kPoison;
  g.bytes.resize(n * es);
  if (t == DType::f32 || t == DType::bf16) g.v = from_bytes(g.bytes, t);
  return g;
}

inline float ulp_bf16(float r) {
  if (r == 0.0f || !std::isfinite(r)) return 0.0f;
  int e;
  std::frexp(r, &e);  // |r| in [2^(e-1), 2^e): 8 significant bits -> ulp 2^(e-8)
  return std::ldexp(1.0f, e - 8);
}

// "" when every element of [0, live_elems) is within tolerance of want and every element after
// it is +0.0 (a padding row); else a report of the count and the first failure.
inline std::string compare(const std::vector<float>& got, const std::vector<float>& want, DType t, double ulps,
                           size_t live_elems) {
  size_t bad = 0, first = SIZE_MAX;
  for (size_t i = 0; i < want.size(); ++i) {
    bool ok;
    if (i >= live_elems) {
      ok = got[i] == 0.0f && !std::signbit(got[i]);
    } else {
      const double tol = t == DType::bf16 ? ulps * ulp_bf16(want[i]) + 1e-6 : 1e-5 * std::fabs(want[i]) + 1e-7;
      ok = std::fabs(static_cast<double>(got[i]) - want[i]) <= tol;  // false for NaN (poison)
    }
    if (!ok) {
      ++bad;
      if (first == SIZE_MAX) first = i;
    }
  }
  if (bad == 0) return "";
  return fmt::format("{} of {} elements out of tolerance; first at {} (live {}): got {:.9g}, expected {:.9g}", bad,
                     want.size(), first, live_elems, got[first], first < live_elems ? want[first] : 0.0f);
}

// Padding rows of a reference: zero from element live_elems on.
inline void zero_tail(std::vector<float>& v, size_t live_elems) {
  std::fill(v.begin() + std::min(live_elems, v.size()), v.end(), 0.0f);
}

}  // namespace sg::test::norms
