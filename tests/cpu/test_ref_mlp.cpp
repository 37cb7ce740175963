// CPU tests of the reference linear / SwiGLU MLP / embedding / argmax (kernels/ref/mlp_ref.h):
// hand cases, the double accumulation, bf16 rounding of the intermediates, argmax ties and NaN,
// and argument validation.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/numeric.h"
#include "kernels/ref/mlp_ref.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"

using namespace sg;
using namespace sg::ref;

TEST_CASE("linear by hand: y = W x with W [out, in]", "[ref][linear]") {
  const float W[6] = {1, 2, 3,    // row 0
                      4, 5, 6};   // row 1
  const float x[6] = {1, -1, 2,   // token 0
                      0, 1,  0};  // token 1
  float y[4] = {};
  linear(x, W, y, 2, 3, 2);
  CHECK(y[0] == 5.f);
  CHECK(y[1] == 11.f);
  CHECK(y[2] == 2.f);
  CHECK(y[3] == 5.f);
}

TEST_CASE("linear accumulates in double", "[ref][linear]") {
  // In f32, 1e8 + 1 rounds back to 1e8 and the sequential sum ends at 0; in double it is 1.
  const float W[3] = {1, 1, 1};
  const float x[3] = {1e8f, 1.f, -1e8f};
  float y[1];
  linear(x, W, y, 1, 3, 1);
  CHECK(y[0] == 1.f);
}

TEST_CASE("linear matches a double evaluation and rounds to bf16 on request", "[ref][linear]") {
  const int T = 3, in = 129, out = 17;
  auto x = test::uniform_bf16(T * in, 81);
  auto W = test::uniform_bf16(out * in, 82);
  std::vector<float> y(T * out), yb(T * out);
  linear(x.data(), W.data(), y.data(), T, in, out);
  linear(x.data(), W.data(), yb.data(), T, in, out, Store::bf16);
  int differ = 0;
  for (int t = 0; t < T; ++t) {
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int i = 0; i < in; ++i) s += double(W[o * in + i]) * x[t * in + i];
      CHECK(y[t * out + o] == static_cast<float>(s));
      CHECK(yb[t * out + o] == round_bf16(static_cast<float>(s)));
      differ += yb[t * out + o] != y[t * out + o];
    }
  }
  CHECK(differ > 0);
}

TEST_CASE("swiglu mlp by hand", "[ref][swiglu]") {
  const float x[2] = {1, 2};
  const float gate_w[4] = {1, 0, 0, 1};   // g = {1, 2}
  const float up_w[4] = {1, 1, 2, 0};     // u = {3, 2}
  const float down_w[4] = {1, 0, 1, -1};  // y = {h0, h0 - h1}
  float y[2] = {};
  swiglu_mlp(x, gate_w, up_w, down_w, y, 1, 2, 2);
  // h = {silu(1) * 3, silu(2) * 2} = {2.1931757..., 3.5231883...}
  CHECK(y[0] == Approx(2.193175735890015).epsilon(1e-6));
  CHECK(y[1] == Approx(-1.3300125760215145).epsilon(1e-6));
}

TEST_CASE("swiglu mlp: act rounding follows HF's bf16 intermediates", "[ref][swiglu]") {
  const int T = 2, H = 32, I = 48;
  auto x = test::uniform_bf16(T * H, 91);
  auto gw = test::uniform_bf16(I * H, 92, -0.5f, 0.5f);
  auto uw = test::uniform_bf16(I * H, 93, -0.5f, 0.5f);
  auto dw = test::uniform_bf16(H * I, 94, -0.5f, 0.5f);
  std::vector<float> yf(T * H), yb(T * H);
  swiglu_mlp(x.data(), gw.data(), uw.data(), dw.data(), yf.data(), T, H, I);
  swiglu_mlp(x.data(), gw.data(), uw.data(), dw.data(), yb.data(), T, H, I, Store::bf16, Store::bf16);

  // The same composition spelled out with the pieces.
  auto compose = [&](Store act, Store out) {
    std::vector<float> g(T * I), u(T * I), y(T * H);
    linear(x.data(), gw.data(), g.data(), T, H, I, act);
    linear(x.data(), uw.data(), u.data(), T, H, I, act);
    for (int i = 0; i < T * I; ++i) {
      const float a = store(g[i] / (1.f + std::exp(-g[i])), act);
      g[i] = store(a * u[i], act);
    }
    linear(g.data(), dw.data(), y.data(), T, I, H, out);
    return y;
  };
  CHECK(yf == compose(Store::f32, Store::f32));
  CHECK(yb == compose(Store::bf16, Store::bf16));
  CHECK(yb != yf);
  // f32 result against a double evaluation.
  for (int t = 0; t < T; ++t) {
    std::vector<double> h(I);
    for (int i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int k = 0; k < H; ++k) {
        g += double(gw[i * H + k]) * x[t * H + k];
        u += double(uw[i * H + k]) * x[t * H + k];
      }
      h[i] = g / (1 + std::exp(-g)) * u;
    }
    for (int o = 0; o < H; ++o) {
      double s = 0;
      for (int i = 0; i < I; ++i) s += double(dw[o * I + i]) * h[i];
      CHECK(yf[t * H + o] == Approx(s).epsilon(1e-5).margin(1e-6));
    }
  }
}

TEST_CASE("argmax: first index of the maximum, NaN as torch", "[ref][argmax]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SECTION("ties take the first index") {
    const float x[5] = {1, 3, 3, 2, 3};
    CHECK(argmax(x, 5) == 1);
  }
  SECTION("maximum at either end") {
    const float a[4] = {9, 1, 2, 3};
    const float b[4] = {-5, -4, -3, -2};
    CHECK(argmax(a, 4) == 0);
    CHECK(argmax(b, 4) == 3);
  }
  SECTION("all -inf gives 0; +inf wins") {
    const float a[3] = {-inf, -inf, -inf};
    const float b[3] = {1e30f, inf, 2};
    CHECK(argmax(a, 3) == 0);
    CHECK(argmax(b, 3) == 1);
  }
  SECTION("the first NaN wins") {
    const float a[5] = {1, 7, nan, 9, nan};
    const float b[3] = {nan, 1, 2};
    CHECK(argmax(a, 5) == 2);
    CHECK(argmax(b, 3) == 0);
  }
  SECTION("per row") {
    const float x[6] = {0, 5, 5,   // row 0 -> 1
                        7, 1, 8};  // row 1 -> 2
    int64_t idx[2] = {-1, -1};
    argmax_rows(x, idx, 2, 3);
    CHECK(idx[0] == 1);
    CHECK(idx[1] == 2);
  }
}

TEST_CASE("embedding looks up rows of the [V, H] table", "[ref][embedding]") {
  const int V = 5, H = 3;
  auto table = test::uniform(V * H, 101);
  const int64_t ids[4] = {4, 0, 4, 2};
  std::vector<float> y(4 * H);
  embedding(table.data(), ids, y.data(), 4, V, H);
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < H; ++i) CHECK(y[t * H + i] == table[ids[t] * H + i]);
  const int64_t bad_hi[1] = {5};
  const int64_t bad_lo[1] = {-1};
  CHECK_THROWS_AS(embedding(table.data(), bad_hi, y.data(), 1, V, H), std::invalid_argument);
  CHECK_THROWS_AS(embedding(table.data(), bad_lo, y.data(), 1, V, H), std::invalid_argument);
}

TEST_CASE("linear / mlp / argmax reject bad arguments", "[ref][linear][swiglu][argmax]") {
  const float a[4] = {1, 2, 3, 4};
  float y[4];
  CHECK_THROWS_AS(linear(a, a, y, 0, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(linear(a, a, y, 1, 0, 2), std::invalid_argument);
  CHECK_THROWS_AS(linear(a, a, y, 1, 2, -1), std::invalid_argument);
  CHECK_THROWS_AS(linear(nullptr, a, y, 1, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(swiglu_mlp(a, a, a, a, y, 1, 2, 0), std::invalid_argument);
  CHECK_THROWS_AS(swiglu_mlp(a, a, nullptr, a, y, 1, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(argmax(a, 0), std::invalid_argument);
  CHECK_THROWS_AS(embedding(a, nullptr, y, 1, 2, 2), std::invalid_argument);
}
