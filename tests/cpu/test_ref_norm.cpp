// CPU tests of the reference RMSNorms (kernels/ref/norm_ref.h): hand-computed cases, the
// zero-centred vs as-is weight, the gate, aliasing, bf16 storage, a double-precision cross-check
// and argument validation.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/numeric.h"
#include "kernels/ref/norm_ref.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"

using namespace sg;
using namespace sg::ref;

namespace {

double silu_d(double z) { return z / (1.0 + std::exp(-z)); }

}  // namespace

TEST_CASE("rmsnorm of [3, 4] by hand", "[ref][rmsnorm]") {
  // mean(x^2) = 12.5, 1/sqrt(12.5) = 0.28284271...
  const float x[2] = {3.f, 4.f};
  float y[2] = {};
  SECTION("w = 0 means scale 1") {
    const float w[2] = {0.f, 0.f};
    rmsnorm(x, w, y, 1, 2, 0.f);
    CHECK(y[0] == Approx(0.848528137423857).epsilon(1e-6));
    CHECK(y[1] == Approx(1.131370849898476).epsilon(1e-6));
    // Unit root-mean-square after normalisation.
    CHECK((y[0] * y[0] + y[1] * y[1]) / 2 == Approx(1.0).epsilon(1e-6));
  }
  SECTION("zero-centred weight scales by 1 + w") {
    const float w[2] = {0.5f, -1.f};
    rmsnorm(x, w, y, 1, 2, 0.f);
    CHECK(y[0] == Approx(1.2727922061357855).epsilon(1e-6));
    CHECK(y[1] == 0.f);
  }
  SECTION("eps enters under the square root") {
    const float w[2] = {0.f, 0.f};
    rmsnorm(x, w, y, 1, 2, 12.5f);  // mean + eps = 25 -> 1/5
    CHECK(y[0] == Approx(0.6).epsilon(1e-6));
    CHECK(y[1] == Approx(0.8).epsilon(1e-6));
  }
}

TEST_CASE("rmsnorm of a zero row is zero, not NaN", "[ref][rmsnorm]") {
  const std::vector<float> x(8, 0.f), w(8, 0.25f);
  std::vector<float> y(8, std::numeric_limits<float>::quiet_NaN());
  rmsnorm(x.data(), w.data(), y.data(), 1, 8, 1e-6f);
  for (float v : y) CHECK(v == 0.f);
}

TEST_CASE("rmsnorm rows are independent and in-place equals out-of-place", "[ref][rmsnorm]") {
  const int rows = 5, n = 37;
  auto x = test::uniform(rows * n, 11, -3.f, 3.f);
  auto w = test::uniform(n, 12, -0.5f, 0.5f);
  std::vector<float> y(rows * n);
  rmsnorm(x.data(), w.data(), y.data(), rows, n, 1e-6f);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> one(n);
    rmsnorm(x.data() + r * n, w.data(), one.data(), 1, n, 1e-6f);
    for (int i = 0; i < n; ++i) CHECK(one[i] == y[r * n + i]);
  }
  auto inplace = x;
  rmsnorm(inplace.data(), w.data(), inplace.data(), rows, n, 1e-6f);
  CHECK(inplace == y);
}

TEST_CASE("rmsnorm matches a double-precision evaluation", "[ref][rmsnorm]") {
  const int rows = 4, n = 2560;
  const float eps = 1e-6f;
  auto x = test::uniform_bf16(rows * n, 21, -4.f, 4.f);
  auto w = test::uniform_bf16(n, 22, -0.3f, 0.3f);
  std::vector<float> y(rows * n);
  rmsnorm(x.data(), w.data(), y.data(), rows, n, eps);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int i = 0; i < n; i += 97) {
      INFO("row " << r << " feature " << i);
      CHECK(y[r * n + i] == Approx(x[r * n + i] * inv * (1.0 + w[i])).epsilon(1e-5).margin(1e-6));
    }
  }
}

TEST_CASE("rmsnorm Store::bf16 rounds the f32 result once", "[ref][rmsnorm]") {
  const int n = 64;
  auto x = test::uniform(n, 31);
  auto w = test::uniform(n, 32, -0.5f, 0.5f);
  std::vector<float> f(n), b(n);
  rmsnorm(x.data(), w.data(), f.data(), 1, n, 1e-6f, Store::f32);
  rmsnorm(x.data(), w.data(), b.data(), 1, n, 1e-6f, Store::bf16);
  int differ = 0;
  for (int i = 0; i < n; ++i) {
    CHECK(b[i] == round_bf16(f[i]));
    differ += b[i] != f[i];
  }
  CHECK(differ > 0);  // random f32 results are almost never bf16-representable
}

TEST_CASE("gated rmsnorm by hand", "[ref][gated_rmsnorm]") {
  const float x[2] = {3.f, 4.f};
  float y[2] = {};
  SECTION("weight used as is, silu of the gate") {
    const float w[2] = {2.f, 0.5f};
    const float z[2] = {1.f, -1.f};
    gated_rmsnorm(x, z, w, y, 1, 2, 0.f);
    CHECK(y[0] == Approx(1.2406475481453008).epsilon(1e-6));
    CHECK(y[1] == Approx(-0.15213624223413777).epsilon(1e-6));
  }
  SECTION("z = 0 gives 0") {
    const float w[2] = {2.f, 0.5f};
    const float z[2] = {0.f, 0.f};
    gated_rmsnorm(x, z, w, y, 1, 2, 1e-6f);
    CHECK(y[0] == 0.f);
    CHECK(y[1] == 0.f);
  }
  SECTION("w = 0 gives 0 (not 1 + w)") {
    const float w[2] = {0.f, 0.f};
    const float z[2] = {5.f, 5.f};
    gated_rmsnorm(x, z, w, y, 1, 2, 1e-6f);
    CHECK(y[0] == 0.f);
    CHECK(y[1] == 0.f);
  }
}

TEST_CASE("gated rmsnorm matches a double-precision evaluation", "[ref][gated_rmsnorm]") {
  const int rows = 6, n = 128;  // e.g. 2 tokens x 3 v-heads, Dv = 128
  const float eps = 1e-6f;
  auto x = test::uniform_bf16(rows * n, 41, -2.f, 2.f);
  auto z = test::uniform_bf16(rows * n, 42, -6.f, 6.f);
  auto w = test::uniform_bf16(n, 43, 0.5f, 1.5f);
  std::vector<float> y(rows * n), yb(rows * n);
  gated_rmsnorm(x.data(), z.data(), w.data(), y.data(), rows, n, eps);
  gated_rmsnorm(x.data(), z.data(), w.data(), yb.data(), rows, n, eps, Store::bf16);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int i = 0; i < n; ++i) {
      const int k = r * n + i;
      INFO("row " << r << " feature " << i);
      CHECK(y[k] == Approx(w[i] * (x[k] * inv) * silu_d(z[k])).epsilon(1e-5).margin(1e-6));
      CHECK(yb[k] == round_bf16(y[k]));
    }
  }
  // In place (y aliasing x) gives the same result.
  auto inplace = x;
  gated_rmsnorm(inplace.data(), z.data(), w.data(), inplace.data(), rows, n, eps);
  CHECK(inplace == y);
}

TEST_CASE("norms reject bad arguments", "[ref][rmsnorm][gated_rmsnorm]") {
  const float x[4] = {1, 2, 3, 4}, w[4] = {}, z[4] = {1, 1, 1, 1};
  float y[4];
  CHECK_THROWS_AS(rmsnorm(x, w, y, 0, 4, 1e-6f), std::invalid_argument);
  CHECK_THROWS_AS(rmsnorm(x, w, y, 1, 0, 1e-6f), std::invalid_argument);
  CHECK_THROWS_AS(rmsnorm(x, w, y, 1, -4, 1e-6f), std::invalid_argument);
  CHECK_THROWS_AS(rmsnorm(nullptr, w, y, 1, 4, 1e-6f), std::invalid_argument);
  CHECK_THROWS_AS(rmsnorm(x, w, y, 1, 4, -1.f), std::invalid_argument);
  CHECK_THROWS_AS(gated_rmsnorm(x, z, w, y, -1, 4, 1e-6f), std::invalid_argument);
  CHECK_THROWS_AS(gated_rmsnorm(x, nullptr, w, y, 1, 4, 1e-6f), std::invalid_argument);
}
