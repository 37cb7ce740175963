// CPU tests of the failing comparisons' report (tools/cli/compare.h): the views' coordinates,
// the bins' maxima, the count and the first element, and NaN handling.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tools/cli/compare.h"

using namespace sg::diag;

namespace {

// A [tokens, Hv, Dv] output of ones with one difference of `d` at (token, hv, col).
struct Out {
  int64_t tokens, Hv, Dv;
  std::vector<float> want, got;
  Out(int64_t t, int64_t h, int64_t d) : tokens(t), Hv(h), Dv(d), want(t * h * d, 1.0f), got(want) {}
  float& at(int64_t t, int64_t h, int64_t c) { return got[static_cast<size_t>((t * Hv + h) * Dv + c)]; }
};

}  // namespace

TEST_CASE("error map: a difference lands in its bin of every view", "[tolerance]") {
  Out o(130, 2, 16);  // three chunks, the last of two tokens
  o.at(70, 1, 9) = 1.5f;
  o.at(129, 0, 0) = 0.75f;
  const auto views = delta_out_views(o.tokens, o.Hv, o.Dv);
  REQUIRE(views.size() == 4);
  const size_t n = o.want.size();
  // chunk: token 70 -> chunk 1 (0.5), token 129 -> chunk 2 (0.25)
  CHECK(error_bins(o.got.data(), o.want.data(), n, views[0], 1.0) == std::vector<double>{0, 0.5, 0.25});
  // row in chunk, bins of 8: 70 % 64 = 6 -> bin 0; 129 % 64 = 1 -> bin 0
  const auto rows = error_bins(o.got.data(), o.want.data(), n, views[1], 1.0);
  REQUIRE(rows.size() == 8);
  CHECK(rows[0] == 0.5);
  for (size_t b = 1; b < rows.size(); ++b) CHECK(rows[b] == 0);
  CHECK(error_bins(o.got.data(), o.want.data(), n, views[2], 1.0) == std::vector<double>{0.25, 0.5});
  CHECK(error_bins(o.got.data(), o.want.data(), n, views[3], 1.0) == std::vector<double>{0.25, 0.5});

  const std::string s = error_map(o.got.data(), o.want.data(), n, views, 0.3);
  INFO(s);
  CHECK(s.find("1 of 4160 elements differ by more than 0.3") == 0);
  CHECK(s.find("first at [chunk 1, row in chunk 6, v-head 1, value column 9]: got 1.5, want 1") != std::string::npos);
  CHECK(s.find("\n  chunk: - 0.5 0.25") != std::string::npos);
  CHECK(s.find("\n  row in chunk (bins of 8): 0.5 - - - - - - -") != std::string::npos);
  CHECK(s.find("\n  value column (bins of 8): 0.25 0.5") != std::string::npos);
}

TEST_CASE("error map: equal arrays, NaN, infinities and the bin limit", "[tolerance]") {
  Out o(64, 1, 8);
  const size_t n = o.want.size();
  const auto views = delta_out_views(o.tokens, o.Hv, o.Dv);
  CHECK(error_map(o.got.data(), o.want.data(), n, views, 0).find("0 of 512 elements") == 0);
  CHECK(error_map(o.got.data(), o.want.data(), n, views, 0).find("first") == std::string::npos);

  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(element_difference(nan, nan) == 0);
  CHECK(std::isinf(element_difference(nan, 1.0f)));
  CHECK(std::isinf(element_difference(1.0f, nan)));
  CHECK(element_difference(inf, inf) == 0);
  CHECK(std::isinf(element_difference(inf, 1.0f)));
  CHECK(element_difference(-0.0f, 0.0f) == 0);

  o.at(5, 0, 3) = nan;  // counted, whatever the tolerance
  const std::string s = error_map(o.got.data(), o.want.data(), n, views, 1e30);
  INFO(s);
  CHECK(s.find("1 of 512 elements") == 0);
  CHECK(s.find("got nan") != std::string::npos);
  CHECK(s.find("chunk: inf") != std::string::npos);

  // A NaN in want does not set the scale; a view with more bins than printed says how many more.
  std::vector<float> want(100, 2.0f), got(want);
  want[0] = nan;
  got[0] = nan;
  got[99] = 3.0f;
  const std::string t = error_map(got.data(), want.data(), 100, {{"i", 1, 100, 1}}, 0.1, 10);
  INFO(t);
  CHECK(t.find("1 of 100 elements differ by more than 0.1 of the largest |want| (2)") == 0);
  CHECK(t.find("i: - - - - - - - - - - ... (90 more)") != std::string::npos);
}

TEST_CASE("error map: the largest normalised difference, NaN at the same places agreeing", "[tolerance]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> want = {1.0f, -4.0f, nan, 2.0f};
  std::vector<float> got = {1.5f, -4.0f, nan, 2.0f};
  CHECK(max_normalised_difference(got.data(), want.data(), 4) == 0.5 / 4.0);  // NaN in want sets no scale
  got[2] = 0.0f;                                                              // NaN on one side only
  CHECK(std::isinf(max_normalised_difference(got.data(), want.data(), 4)));
  const std::vector<float> zero(4, 0.0f), small = {0.0f, 0.25f, 0.0f, 0.0f};
  CHECK(max_normalised_difference(small.data(), zero.data(), 4) == 0.25);  // unscaled when want is zero
}

TEST_CASE("error map: the state's views", "[tolerance]") {
  const auto v = delta_state_views(4, 128, 128);
  REQUIRE(v.size() == 3);
  CHECK((v[0].stride == 128 * 128 && v[0].size == 4));
  CHECK((v[1].stride == 128 && v[1].size == 128 && v[1].bin == 8));
  CHECK((v[2].stride == 1 && v[2].size == 128 && v[2].bin == 8));
}
