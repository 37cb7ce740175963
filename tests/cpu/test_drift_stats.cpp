// CPU tests of `stepgraph drift`'s statistics (tools/cli/drift_stats.h): the normalised error, the
// windows, the agreement and the first divergence, the table and the JSON.
#include <cmath>
#include <limits>
#include <vector>

#include "engine/error.h"
#include "tests/support/catch.h"
#include "tools/cli/drift_stats.h"

using namespace sg;
using namespace sg::cli;

TEST_CASE("drift: the normalised max error", "[drift]") {
  CHECK(normalised_max_error({1, -4, 2}, {1, -4, 2}) == 0.0);
  CHECK(normalised_max_error({1, -4, 2}, {1.5f, -4, 1}) == 0.25);  // max |b - a| = 1 over max |a| = 4
  CHECK(normalised_max_error({0, 0}, {0, 0}) == 0.0);
  CHECK(std::isinf(normalised_max_error({0, 0}, {0, 1})));
  CHECK(std::isinf(normalised_max_error({1, 2}, {1, std::numeric_limits<float>::quiet_NaN()})));
  CHECK(std::isinf(normalised_max_error({std::numeric_limits<float>::infinity(), 2}, {1, 2})));
  CHECK_THROWS_AS(normalised_max_error({1, 2}, {1}), Error);
}

TEST_CASE("drift: windows, agreement and the first divergence", "[drift]") {
  DriftStats s(2);
  const std::vector<float> a = {1, 2, 4};
  s.add(a, a, 2, 2);             // position 0: equal
  s.add(a, {1, 2, 3}, 2, 2);     // 1: error 0.25, same token
  s.add(a, {1, 2.5f, 4}, 2, 1);  // 2: error 0.125, tokens differ
  s.add(a, a, 2, 2);             // 3
  s.add(a, {1, 2, 5}, 0, 1);     // 4: error 0.25, tokens differ again
  CHECK(s.positions() == 5);
  CHECK(s.first_divergence() == 2);
  REQUIRE(s.windows().size() == 3);
  CHECK(s.windows()[0].first == 0);
  CHECK(s.windows()[0].count == 2);
  CHECK(s.windows()[0].max_err == 0.25);
  CHECK(s.windows()[0].mean_err() == 0.125);
  CHECK(s.windows()[0].agree == 2);
  CHECK(s.windows()[1].first == 2);
  CHECK(s.windows()[1].max_err == 0.125);
  CHECK(s.windows()[1].agree == 1);
  CHECK(s.windows()[2].first == 4);
  CHECK(s.windows()[2].count == 1);
  CHECK(s.windows()[2].agree == 0);
  CHECK(s.total().count == 5);
  CHECK(s.total().agree == 3);
  CHECK(s.total().max_err == 0.25);
  CHECK(s.total().mean_err() == Approx((0.25 + 0.125 + 0.25) / 5));
  CHECK(s.distinct_tokens() == 2);  // A's tokens: 2, 2, 2, 2, 0
  CHECK_THROWS_AS(DriftStats(0), Error);
  CHECK_THROWS_AS(s.add({}, {}, 0, 0), Error);
}

TEST_CASE("drift: the table and the JSON", "[drift]") {
  DriftStats same(4);
  same.add({1, 2}, {1, 2}, 1, 1);
  const std::string t = format_drift(same);
  CHECK(t.find("0..0") != std::string::npos);
  CHECK(t.find("100.00%") != std::string::npos);
  CHECK(t.find("greedy tokens: equal at all 1 positions") != std::string::npos);
  const auto j = drift_json(same);
  CHECK(j.at("positions") == 1);
  CHECK(j.at("first_divergence").is_null());
  CHECK(j.at("windows").size() == 1);
  CHECK(j.at("distinct_tokens") == 1);
  CHECK(t.find("A's text: 1 distinct tokens in 1 positions") != std::string::npos);

  DriftStats off(4);
  off.add({1, 2}, {1, 2}, 1, 1);
  off.add({1, 2}, {0, std::numeric_limits<float>::quiet_NaN()}, 1, 0);
  CHECK(format_drift(off).find("first differ at position 1 of 2") != std::string::npos);
  const auto k = drift_json(off);
  CHECK(k.at("first_divergence") == 1);
  CHECK(k.at("total").at("max_error") == "inf");  // JSON has no infinity: a string says it
  CHECK(k.at("total").at("top1_agree") == 1);
}
