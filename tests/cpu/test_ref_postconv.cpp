// CPU tests of the post-conv reference (kernels/ref/postconv_ref.h): the tree-ordered sum of
// squares (proved different from a sequential sum), a hand-computed Dk = 4 case, element-wise
// agreement with an independent implementation through strided views, and argument checks.
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ref/postconv_ref.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"

// The literal trees below must round like the reference: no compiler-fused a*b+c.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

using namespace sg;
using namespace sg::ref;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

float sequential_sum_squares(const std::vector<float>& x) {
  float s = 0.0f;
  for (float v : x) s = s + v * v;
  return s;
}

// docs/MODEL.md's Dk = 128 tree written out literally: add feature i to i+64, then 32, ..., 1.
float tree128(const std::vector<float>& x) {
  float s[128];
  for (int i = 0; i < 128; ++i) s[i] = x[i] * x[i];
  for (int h : {64, 32, 16, 8, 4, 2, 1})
    for (int i = 0; i < h; ++i) s[i] = s[i] + s[i + h];
  return s[0];
}

// ARMS.md's token_tile arm: lane l holds features l, l+32, l+64, l+96 and sums
// (x0^2 + x2^2) + (x1^2 + x3^2), then butterfly shuffles 16..1.
float token_tile128(const std::vector<float>& x) {
  float p[32];
  for (int l = 0; l < 32; ++l) {
    const float x0 = x[l], x1 = x[l + 32], x2 = x[l + 64], x3 = x[l + 96];
    p[l] = (x0 * x0 + x2 * x2) + (x1 * x1 + x3 * x3);
  }
  for (int h = 16; h >= 1; h /= 2) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = p[l] + p[l ^ h];
    std::memcpy(p, next, sizeof(p));
  }
  return p[0];
}

float softplus(float y) { return y > 20.0f ? y : std::log1p(std::exp(y)); }

}  // namespace

TEST_CASE("sum_squares_tree: the contract's tree order, not a sequential sum", "[ref][postconv]") {
  const float e = std::ldexp(1.0f, -12);  // e^2 = 2^-24: half an ulp of 1, lost when added to 1 alone
  SECTION("n = 4: (x0^2 + x2^2) + (x1^2 + x3^2)") {
    const std::vector<float> x = {1, e, 0, e};
    CHECK(sum_squares_tree(x.data(), 4) == 1.0f + std::ldexp(1.0f, -23));
    CHECK(sequential_sum_squares(x) == 1.0f);
  }
  SECTION("n = 3 pads to 4 with a zero") {
    const std::vector<float> x = {e, 1, e};  // tree: (e^2 + e^2) + (1 + 0)
    CHECK(sum_squares_tree(x.data(), 3) == 1.0f + std::ldexp(1.0f, -23));
    CHECK(sequential_sum_squares(x) == 1.0f);
  }
  SECTION("n = 128: 1 then 127 tiny squares") {
    std::vector<float> x(128, e);
    x[0] = 1.0f;
    // Only the first level's 1 + e^2 loses its e^2; the other 126 tiny squares add up exactly.
    const float expected = 1.0f + 63 * std::ldexp(1.0f, -23);
    CHECK(sum_squares_tree(x.data(), 128) == expected);
    CHECK(tree128(x) == expected);
    CHECK(sequential_sum_squares(x) == 1.0f);
  }
  SECTION("n = 128 random: equals the literal tree and the token_tile arm bit for bit") {
    int differs_from_sequential = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      const auto x = test::uniform(128, seed, -2.f, 2.f);
      CAPTURE(seed);
      const float t = sum_squares_tree(x.data(), 128);
      CHECK(t == tree128(x));
      CHECK(t == token_tile128(x));
      differs_from_sequential += t != sequential_sum_squares(x);
    }
    CHECK(differs_from_sequential > 0);  // the order is observable on ordinary data
  }
  SECTION("small n") {
    const std::vector<float> x = {3, 4};
    CHECK(sum_squares_tree(x.data(), 0) == 0.0f);
    CHECK(sum_squares_tree(x.data(), 1) == 9.0f);
    CHECK(sum_squares_tree(x.data(), 2) == 25.0f);
  }
}

// Hk = 1, Hv = 2, Dk = 4, Dv = 2: C = 2*4 + 2*2 = 12. Two tokens.
TEST_CASE("postconv: hand-computed Dk=4", "[ref][postconv]") {
  const PostconvShape s32{1, 2, 4, 2, Store::f32};
  const std::vector<float> conv = {3, 4, 0, 0, /* k */ 1, 1,  1, 1, /* v */ 0.1f, -2, 3.5f, 1e-3f,  // token 0
                                   0, 0, 0, 2, /* k */ 1, -2, 2, 0, /* v */ 7,    8,  9,    10};    // token 1
  const std::vector<float> a = {0, 25, -30, 1}, b = {0, -30, 2, 40};
  const std::vector<float> A_log = {0, 0.6931472f}, dt_bias = {0, 0.5f};
  const int T = 2;
  std::vector<float> q(T * 4, kNaN), k(T * 4, kNaN), v(T * 4, kNaN), g(T * 2, kNaN), beta(T * 2, kNaN);
  postconv(s32, T, conv.data(), 12, a.data(), 2, b.data(), 2, A_log.data(), dt_bias.data(), q.data(), k.data(),
           v.data(), g.data(), beta.data());

  // The contract's formulas, evaluated by hand for each head.
  const float inv_q0 = 1.0f / std::sqrt(25.0f + 1e-6f);  // 3^2 + 4^2
  const float inv_k0 = 1.0f / std::sqrt(4.0f + 1e-6f);   // four ones
  const float inv_q1 = 1.0f / std::sqrt(4.0f + 1e-6f);   // one 2
  const float inv_k1 = 1.0f / std::sqrt(9.0f + 1e-6f);   // (1 + 4) + (4 + 0)
  CHECK(q == std::vector<float>{3 * inv_q0, 4 * inv_q0, 0, 0, 0, 0, 0, 2 * inv_q1});
  CHECK(k == std::vector<float>{inv_k0, inv_k0, inv_k0, inv_k0, inv_k1, -2 * inv_k1, 2 * inv_k1, 0});
  CHECK(q[0] == Approx(0.6).epsilon(1e-6));
  CHECK(q[1] == Approx(0.8).epsilon(1e-6));
  CHECK(q[7] == Approx(1.0).epsilon(1e-6));
  CHECK(k[0] == Approx(0.5).epsilon(1e-6));
  CHECK(k[5] == Approx(-2.0 / 3.0).epsilon(1e-6));
  CHECK(v == std::vector<float>{0.1f, -2, 3.5f, 1e-3f, 7, 8, 9, 10});

  // beta = sigmoid(b): sigmoid(0) = 0.5 exactly; sigmoid(-30) ~ e^-30; sigmoid(40) rounds to 1.
  CHECK(beta[0] == 0.5f);
  CHECK(beta[1] == Approx(9.357623e-14).epsilon(1e-5));
  CHECK(beta[2] == Approx(0.8807970780).epsilon(1e-6));
  CHECK(beta[3] == 1.0f);
  // g = -exp(A_log) * softplus(a + dt_bias).
  CHECK(g[0] == -std::log1p(1.0f));  // -ln 2
  CHECK(g[0] == Approx(-0.6931472).epsilon(1e-6));
  CHECK(g[1] == -std::exp(0.6931472f) * 25.5f);  // 25.5 > 20: softplus is the identity
  CHECK(g[1] == Approx(-51.0).epsilon(1e-6));
  CHECK(g[2] == Approx(-9.357623e-14).epsilon(1e-5));  // log1p keeps e^-30 (log(1 + e^-30) = 0)
  CHECK(g[3] == -std::exp(0.6931472f) * std::log1p(std::exp(1.5f)));
  CHECK(g[3] == Approx(-2.0 * 1.7014132).epsilon(1e-6));

  SECTION("bf16 stores round q, k and v once; g and beta stay f32") {
    const PostconvShape s16{1, 2, 4, 2, Store::bf16};
    std::vector<float> q16(T * 4), k16(T * 4), v16(T * 4), g16(T * 2), beta16(T * 2);
    postconv(s16, T, conv.data(), 12, a.data(), 2, b.data(), 2, A_log.data(), dt_bias.data(), q16.data(), k16.data(),
             v16.data(), g16.data(), beta16.data());
    for (int i = 0; i < T * 4; ++i) {
      CHECK(q16[i] == round_bf16(q[i]));
      CHECK(k16[i] == round_bf16(k[i]));
      CHECK(v16[i] == round_bf16(v[i]));
    }
    CHECK(q16[0] != q[0]);  // 0.6 is not a bf16 value
    CHECK(g16 == g);
    CHECK(beta16 == beta);
  }
}

TEST_CASE("postconv: every element matches an independent implementation, strided inputs", "[ref][postconv]") {
  const int Hk = 2, Hv = 4, Dk = 128, Dv = 32, T = GENERATE(1, 17);
  const Store st = GENERATE(Store::f32, Store::bf16);
  CAPTURE(T, st == Store::bf16);
  const int C = 2 * Hk * Dk + Hv * Dv;
  const int64_t cs = C + 5, as = Hv + 3, bs = Hv + 1;  // strides with NaN padding
  const auto conv_c = test::uniform_bf16(T * C, 61, -3.f, 3.f);
  const auto a_c = test::uniform(T * Hv, 62, -25.f, 25.f);
  const auto b_c = test::uniform(T * Hv, 63, -6.f, 6.f);
  const auto A_log = test::uniform(Hv, 64, -2.f, 2.f);
  const auto dt_bias = test::uniform(Hv, 65);
  std::vector<float> conv(T * cs, kNaN), a(T * as, kNaN), b(T * bs, kNaN);
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) conv[t * cs + c] = conv_c[t * C + c];
    for (int h = 0; h < Hv; ++h) a[t * as + h] = a_c[t * Hv + h], b[t * bs + h] = b_c[t * Hv + h];
  }
  std::vector<float> q(T * Hk * Dk, kNaN), k(T * Hk * Dk, kNaN), v(T * Hv * Dv, kNaN), g(T * Hv, kNaN),
      beta(T * Hv, kNaN);
  postconv(PostconvShape{Hk, Hv, Dk, Dv, st}, T, conv.data(), cs, a.data(), as, b.data(), bs, A_log.data(),
           dt_bias.data(), q.data(), k.data(), v.data(), g.data(), beta.data());

  int mismatches = 0;
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < Hk; ++h) {
      for (int which = 0; which < 2; ++which) {  // 0: q, 1: k
        std::vector<float> x(conv_c.begin() + t * C + which * Hk * Dk + h * Dk,
                             conv_c.begin() + t * C + which * Hk * Dk + (h + 1) * Dk);
        const float inv = 1.0f / std::sqrt(tree128(x) + 1e-6f);
        const float* got = (which == 0 ? q.data() : k.data()) + (t * Hk + h) * Dk;
        double norm2 = 0;
        for (int i = 0; i < Dk; ++i) {
          mismatches += got[i] != store(x[i] * inv, st);
          norm2 += double(got[i]) * got[i];
        }
        CHECK(std::sqrt(norm2) == Approx(1.0).epsilon(st == Store::f32 ? 1e-6 : 1e-2));
      }
    }
    for (int j = 0; j < Hv * Dv; ++j) mismatches += v[t * Hv * Dv + j] != conv_c[t * C + 2 * Hk * Dk + j];
    for (int h = 0; h < Hv; ++h) {
      const float bb = b_c[t * Hv + h], aa = a_c[t * Hv + h];
      mismatches += beta[t * Hv + h] != 1.0f / (1.0f + std::exp(-bb));
      mismatches += g[t * Hv + h] != -std::exp(A_log[h]) * softplus(aa + dt_bias[h]);
      CHECK(g[t * Hv + h] < 0.0f);
      CHECK(beta[t * Hv + h] > 0.0f);
      CHECK(beta[t * Hv + h] < 1.0f);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("postconv: argument validation throws", "[ref][postconv]") {
  const PostconvShape ok{1, 2, 4, 2, Store::f32};
  std::vector<float> buf(64, 0.5f), q(8), k(8), v(8), g(4), beta(4);
  auto run = [&](PostconvShape s, int T, int64_t cs, int64_t as, int64_t bs, const float* conv, float* qp) {
    postconv(s, T, conv, cs, buf.data(), as, buf.data(), bs, buf.data(), buf.data(), qp, k.data(), v.data(), g.data(),
             beta.data());
  };
  run(ok, 2, 12, 2, 2, buf.data(), q.data());  // valid (an exception here fails the test case)
  run(ok, 0, 12, 2, 2, nullptr, nullptr);      // T = 0 needs no buffers
  CHECK_THROWS_AS(run(ok, -1, 12, 2, 2, buf.data(), q.data()), std::invalid_argument);
  CHECK_THROWS_AS(run(PostconvShape{0, 2, 4, 2}, 2, 12, 2, 2, buf.data(), q.data()), std::invalid_argument);
  CHECK_THROWS_AS(run(PostconvShape{1, 2, -4, 2}, 2, 12, 2, 2, buf.data(), q.data()), std::invalid_argument);
  CHECK_THROWS_AS(run(PostconvShape{2, 3, 4, 2}, 2, 30, 3, 3, buf.data(), q.data()), std::invalid_argument);
  CHECK_THROWS_AS(run(ok, 2, 11, 2, 2, buf.data(), q.data()), std::invalid_argument);
  CHECK_THROWS_AS(run(ok, 2, 12, 1, 2, buf.data(), q.data()), std::invalid_argument);
  CHECK_THROWS_AS(run(ok, 2, 12, 2, 1, buf.data(), q.data()), std::invalid_argument);
  CHECK_THROWS_AS(run(ok, 2, 12, 2, 2, nullptr, q.data()), std::invalid_argument);
  CHECK_THROWS_AS(run(ok, 2, 12, 2, 2, buf.data(), nullptr), std::invalid_argument);
  CHECK_THROWS_AS(sum_squares_tree(buf.data(), -1), std::invalid_argument);
  CHECK_THROWS_AS(sum_squares_tree(nullptr, 3), std::invalid_argument);
  std::string msg;
  try {
    run(PostconvShape{2, 3, 4, 2}, 2, 30, 3, 3, buf.data(), q.data());
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  CHECK(msg == "postconv: Hv (3) must be a multiple of Hk (2)");
}
