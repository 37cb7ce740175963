// postconv_ref.cpp: CPU reference of the GDN post-conv prep (L2 norm of q and k, v copy, gates);
// see postconv_ref.h for the contract.
#include "kernels/ref/postconv_ref.h"

#include <cmath>
#include <string>
#include <vector>

// The byte contract fixes every rounding: the compiler must not fuse a*b+c on its own (for
// example x*x into the first tree addition).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace sg::ref {
namespace {

float softplus(float y) { return y > 20.0f ? y : std::log1p(std::exp(y)); }

// y [n] = store(x[i] * inv, qkv) with inv from the tree-ordered sum of squares.
void l2_normalise(const float* x, int n, Store qkv, float* y) {
  const float inv = 1.0f / std::sqrt(sum_squares_tree(x, n) + 1e-6f);
  for (int i = 0; i < n; ++i) y[i] = store(x[i] * inv, qkv);
}

}  // namespace

float sum_squares_tree(const float* x, int n) {
  const char* op = "sum_squares_tree";
  detail::require(n >= 0, op, "n must be >= 0, got " + std::to_string(n));
  if (n == 0) return 0.0f;
  detail::require_ptr(x, op, "x");
  int P = 1;
  while (P < n) P *= 2;
  std::vector<float> s(P, 0.0f);
  for (int i = 0; i < n; ++i) s[i] = x[i] * x[i];
  for (int h = P / 2; h >= 1; h /= 2)
    for (int i = 0; i < h; ++i) s[i] = s[i] + s[i + h];
  return s[0];
}

void postconv(const PostconvShape& s, int T, const float* conv, int64_t conv_stride, const float* a, int64_t a_stride,
              const float* b, int64_t b_stride, const float* A_log, const float* dt_bias, float* q, float* k, float* v,
              float* g, float* beta) {
  const char* op = "postconv";
  detail::require(s.Hk >= 1 && s.Hv >= 1 && s.Dk >= 1 && s.Dv >= 1, op,
                  "Hk, Hv, Dk, Dv must all be >= 1, got " + std::to_string(s.Hk) + ", " + std::to_string(s.Hv) + ", " +
                      std::to_string(s.Dk) + ", " + std::to_string(s.Dv));
  detail::require(s.Hv % s.Hk == 0, op,
                  "Hv (" + std::to_string(s.Hv) + ") must be a multiple of Hk (" + std::to_string(s.Hk) + ")");
  detail::require(T >= 0, op, "T must be >= 0, got " + std::to_string(T));
  const int64_t qk_size = static_cast<int64_t>(s.Hk) * s.Dk;
  const int64_t C = 2 * qk_size + static_cast<int64_t>(s.Hv) * s.Dv;
  detail::require(conv_stride >= C, op,
                  "conv_stride (" + std::to_string(conv_stride) + ") must be >= C (" + std::to_string(C) + ")");
  detail::require(a_stride >= s.Hv, op,
                  "a_stride (" + std::to_string(a_stride) + ") must be >= Hv (" + std::to_string(s.Hv) + ")");
  detail::require(b_stride >= s.Hv, op,
                  "b_stride (" + std::to_string(b_stride) + ") must be >= Hv (" + std::to_string(s.Hv) + ")");
  if (T == 0) return;
  const void* ptrs[] = {conv, a, b, A_log, dt_bias, q, k, v, g, beta};
  const char* names[] = {"conv", "a", "b", "A_log", "dt_bias", "q", "k", "v", "g", "beta"};
  for (int i = 0; i < 10; ++i) detail::require_ptr(ptrs[i], op, names[i]);

  const int64_t v_size = static_cast<int64_t>(s.Hv) * s.Dv;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = conv + t * conv_stride;  // [C]: q [Hk, Dk] | k [Hk, Dk] | v [Hv, Dv]
    for (int h = 0; h < s.Hk; ++h) {
      l2_normalise(row + h * s.Dk, s.Dk, s.qkv, q + t * qk_size + h * s.Dk);
      l2_normalise(row + qk_size + h * s.Dk, s.Dk, s.qkv, k + t * qk_size + h * s.Dk);
    }
    for (int64_t j = 0; j < v_size; ++j) v[t * v_size + j] = store(row[2 * qk_size + j], s.qkv);
    for (int hv = 0; hv < s.Hv; ++hv) {
      beta[t * s.Hv + hv] = 1.0f / (1.0f + std::exp(-b[t * b_stride + hv]));
      g[t * s.Hv + hv] = -std::exp(A_log[hv]) * softplus(a[t * a_stride + hv] + dt_bias[hv]);
    }
  }
}

}  // namespace sg::ref
