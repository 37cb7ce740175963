// CPU tests of the tests' error metrics (tests/support/tolerance.h): the values they promise, and
// that a NaN or Inf in a result makes any comparison fail (a max over NaN would otherwise drop it).
#include <cmath>
#include <limits>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/tolerance.h"

using namespace sg::test;

TEST_CASE("error metrics: max and L2 normalised errors, non-finite results never pass", "[tolerance]") {
  const std::vector<float> ref = {1.0f, -2.0f, 4.0f, 0.0f};
  std::vector<float> got = {1.0f, -2.5f, 4.0f, 0.25f};
  CHECK(max_normalised_error(got, ref) == 0.5 / 4.0);
  CHECK(std::fabs(l2_normalised_error(got.data(), ref.data(), 4) - std::sqrt((0.25 + 0.0625) / 21.0)) < 1e-12);
  CHECK(max_normalised_error(ref, ref) == 0.0);
  const std::vector<float> zero(4, 0.0f);
  CHECK(max_normalised_error(got, zero) == 4.0);  // unscaled when the reference is zero: max |got|
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    got[2] = bad;
    CHECK(std::isinf(max_normalised_error(got, ref)));
    CHECK(std::isinf(l2_normalised_error(got.data(), ref.data(), 4)));
    CHECK_FALSE(max_normalised_error(got, ref) <= 1e-3);
  }
}
