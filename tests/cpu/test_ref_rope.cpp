// CPU tests of the reference rotary embedding (kernels/ref/rope_ref.h): inverse frequencies,
// identity at position 0, hand-computed rotations (full and partial), norm preservation, the
// relative-position property, per-token positions, bf16 storage and argument validation.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/numeric.h"
#include "kernels/ref/rope_ref.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"

using namespace sg;
using namespace sg::ref;

TEST_CASE("rope inverse frequencies", "[ref][rope]") {
  SECTION("rotary_dim 4, theta 10000: {1, 0.01}") {
    auto f = rope_inv_freq(4, 10000.0);
    REQUIRE(f.size() == 2);
    CHECK(f[0] == 1.f);
    CHECK(f[1] == Approx(0.01).epsilon(1e-6));
  }
  SECTION("rotary_dim 64, theta 1e7 follows theta^(-2i/rotary_dim)") {
    auto f = rope_inv_freq(64, 1e7);
    REQUIRE(f.size() == 32);
    for (int i = 0; i < 32; ++i) {
      INFO("i = " << i);
      CHECK(f[i] == Approx(std::pow(1e7, -2.0 * i / 64)).epsilon(2e-6));
      if (i > 0) CHECK(f[i] < f[i - 1]);
    }
  }
}

TEST_CASE("rope at position 0 is the identity", "[ref][rope]") {
  const int T = 3, H = 2, D = 16;
  auto x = test::uniform(T * H * D, 7);
  auto y = x;
  const int64_t pos[T] = {0, 0, 0};
  rope(y.data(), pos, T, H, D, 8, 1e7);
  CHECK(y == x);
}

TEST_CASE("rope rotates by hand-computed angles", "[ref][rope]") {
  SECTION("rotary_dim 4 of D 4, position 1, theta 10000: pairs (0,2) at 1 rad, (1,3) at 0.01") {
    float x[4] = {1.f, 2.f, 3.f, 4.f};
    const int64_t pos[1] = {1};
    rope(x, pos, 1, 1, 4, 4, 10000.0);
    CHECK(x[0] == Approx(-1.9841106485555495).epsilon(1e-6));  // 1 cos1 - 3 sin1
    CHECK(x[1] == Approx(1.959900667496664).epsilon(1e-6));    // 2 cos.01 - 4 sin.01
    CHECK(x[2] == Approx(2.4623779024123156).epsilon(1e-6));   // 3 cos1 + 1 sin1
    CHECK(x[3] == Approx(4.019799668334994).epsilon(1e-6));    // 4 cos.01 + 2 sin.01
  }
  SECTION("rotary_dim 2 of D 4, position 2: pair (0,1) at 2 rad, the tail passes through") {
    float x[4] = {1.f, 2.f, 3.f, 4.f};
    const int64_t pos[1] = {2};
    rope(x, pos, 1, 1, 4, 2, 10000.0);
    CHECK(x[0] == Approx(-2.234741690198506).epsilon(1e-6));  // cos2 - 2 sin2
    CHECK(x[1] == Approx(0.0770037537313969).epsilon(1e-5));  // 2 cos2 + sin2
    CHECK(x[2] == 3.f);
    CHECK(x[3] == 4.f);
  }
}

TEST_CASE("rope preserves the norm of each rotated pair and passes the tail through", "[ref][rope]") {
  const int T = 5, H = 4, D = 256, R = 64;
  auto x = test::uniform_bf16(T * H * D, 17, -2.f, 2.f);
  auto y = x;
  const int64_t pos[T] = {0, 1, 77, 4095, 262143};
  rope(y.data(), pos, T, H, D, R, 1e7);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const float* a = x.data() + (t * H + h) * D;
      const float* b = y.data() + (t * H + h) * D;
      for (int i = 0; i < R / 2; ++i) {
        const double before = double(a[i]) * a[i] + double(a[i + R / 2]) * a[i + R / 2];
        const double after = double(b[i]) * b[i] + double(b[i + R / 2]) * b[i + R / 2];
        INFO("t " << t << " h " << h << " pair " << i);
        CHECK(after == Approx(before).epsilon(1e-5).margin(1e-7));
      }
      for (int i = R; i < D; ++i) CHECK(b[i] == a[i]);
    }
  }
  // Something actually rotated (positions > 0 with a nonzero angle).
  CHECK(y != x);
}

TEST_CASE("rope: q.k depends only on the position difference", "[ref][rope]") {
  const int D = 32, R = 32;
  auto q = test::uniform(D, 51);
  auto k = test::uniform(D, 52);
  auto dot_at = [&](int64_t pq, int64_t pk) {
    auto a = q, b = k;
    rope(a.data(), &pq, 1, 1, D, R, 10000.0);
    rope(b.data(), &pk, 1, 1, D, R, 10000.0);
    double s = 0;
    for (int i = 0; i < D; ++i) s += double(a[i]) * b[i];
    return s;
  };
  const double d1 = dot_at(10, 7);
  CHECK(dot_at(103, 100) == Approx(d1).epsilon(1e-4));
  CHECK(dot_at(1003, 1000) == Approx(d1).epsilon(1e-4));
  // ...and does depend on it.
  CHECK(std::abs(dot_at(10, 3) - d1) > 1e-3);
}

TEST_CASE("rope: each token uses its own position, heads of a token rotate alike", "[ref][rope]") {
  const int T = 4, H = 3, D = 8, R = 4;
  auto head = test::uniform(D, 61);
  std::vector<float> x;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) x.insert(x.end(), head.begin(), head.end());
  const int64_t pos[T] = {5, 0, 9, 5};
  rope(x.data(), pos, T, H, D, R, 10000.0);
  auto row = [&](int t, int h) {
    return std::vector<float>(x.begin() + (t * H + h) * D, x.begin() + (t * H + h + 1) * D);
  };
  for (int h = 1; h < H; ++h) CHECK(row(2, h) == row(2, 0));
  CHECK(row(0, 0) == row(3, 0));  // same position, same result
  CHECK(row(1, 0) == head);       // position 0
  CHECK(row(0, 0) != row(2, 0));  // different positions differ
  // Single-token calls agree with the batched call.
  for (int t = 0; t < T; ++t) {
    auto one = head;
    rope(one.data(), &pos[t], 1, 1, D, R, 10000.0);
    CHECK(one == row(t, 1));
  }
}

TEST_CASE("rope Store::bf16 rounds the f32 rotation once", "[ref][rope]") {
  const int D = 64;
  auto x = test::uniform_bf16(D, 71);
  auto f = x, b = x;
  const int64_t pos[1] = {123};
  rope(f.data(), pos, 1, 1, D, 32, 1e7, Store::f32);
  rope(b.data(), pos, 1, 1, D, 32, 1e7, Store::bf16);
  int differ = 0;
  for (int i = 0; i < D; ++i) {
    CHECK(b[i] == round_bf16(f[i]));
    differ += b[i] != f[i];
  }
  CHECK(differ > 0);
}

TEST_CASE("rope rejects bad arguments", "[ref][rope]") {
  float x[8] = {};
  const int64_t pos[1] = {0};
  const int64_t bad_pos[1] = {-1};
  CHECK_THROWS_AS(rope(x, pos, 1, 1, 8, 3, 1e4), std::invalid_argument);   // odd rotary_dim
  CHECK_THROWS_AS(rope(x, pos, 1, 1, 8, 10, 1e4), std::invalid_argument);  // rotary_dim > D
  CHECK_THROWS_AS(rope(x, pos, 1, 1, 8, 0, 1e4), std::invalid_argument);
  CHECK_THROWS_AS(rope(x, pos, 0, 1, 8, 4, 1e4), std::invalid_argument);
  CHECK_THROWS_AS(rope(x, pos, 1, 0, 8, 4, 1e4), std::invalid_argument);
  CHECK_THROWS_AS(rope(x, pos, 1, 1, 8, 4, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(rope(x, bad_pos, 1, 1, 8, 4, 1e4), std::invalid_argument);
  CHECK_THROWS_AS(rope(nullptr, pos, 1, 1, 8, 4, 1e4), std::invalid_argument);
  CHECK_THROWS_AS(rope_inv_freq(5, 1e4), std::invalid_argument);
}
