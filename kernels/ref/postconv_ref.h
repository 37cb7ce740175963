// postconv_ref.h: CPU reference of the GDN post-conv prep (docs/MODEL.md, step 3): split each conv
// output row into q | k | v, L2-normalise q and k per head with the contract's tree-ordered sum of
// squares, and compute the gates g and beta per v-head. The f32 operation order is the contract's,
// so q, k, v match every GPU arm bit for bit; g and beta use std::exp / std::log1p, which may
// differ from the GPU's expf / log1pf by an ulp.
#pragma once
#include <cstdint>

#include "kernels/ref/ref_common.h"

namespace sg::ref {

struct PostconvShape {
  int Hk, Hv, Dk, Dv;       // all >= 1, Hv a multiple of Hk; conv channels C = 2*Hk*Dk + Hv*Dv
  Store qkv = Store::bf16;  // how q, k, v are stored (g and beta are always f32)
};

// Sum of squares in the contract's tree order: P = smallest power of two >= n;
// s[i] = x[i]*x[i] for i < n, 0 beyond; then for h = P/2, P/4, ..., 1: s[i] = s[i] + s[i+h] for
// i < h; returns s[0]. For n = 128 this is docs/MODEL.md's "add feature i to i+64, then 32, 16,
// 8, 4, 2, 1". n = 0 returns 0. Throws std::invalid_argument for n < 0 or a null x with n > 0.
float sum_squares_tree(const float* x,  // [n]
                       int n);

// Per token t, q/k head h and v-head hv:
//   x = q (or k) head h of conv row t; inv = 1.0f / std::sqrt(sum_squares_tree(x, Dk) + 1e-6f);
//   q[t, h, i] = store(x[i] * inv, qkv) (k likewise); v[t, hv, j] = store(conv v entry, qkv);
//   beta[t, hv] = 1.0f / (1.0f + std::exp(-b[t, hv]));
//   g[t, hv] = -std::exp(A_log[hv]) * softplus(a[t, hv] + dt_bias[hv]),
//   softplus(y) = y > 20.0f ? y : std::log1p(std::exp(y)).
// Throws std::invalid_argument on bad arguments (sizes < 1, T < 0, Hv not a multiple of Hk,
// strides too small, null pointers when T > 0).
void postconv(const PostconvShape& s, int T,
              const float* conv,  // [T, conv_stride], conv_stride >= C; channels q | k | v
              int64_t conv_stride,
              const float* a,  // [T, a_stride], a_stride >= Hv; first Hv entries used
              int64_t a_stride,
              const float* b,  // [T, b_stride], b_stride >= Hv; first Hv entries used
              int64_t b_stride,
              const float* A_log,    // [Hv]
              const float* dt_bias,  // [Hv]
              float* q,              // [T, Hk, Dk] stored with qkv
              float* k,              // [T, Hk, Dk] stored with qkv
              float* v,              // [T, Hv, Dv] stored with qkv
              float* g,              // [T, Hv] f32
              float* beta);          // [T, Hv] f32

}  // namespace sg::ref
