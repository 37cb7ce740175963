// CPU tests of the clock sampler's summaries and comparisons (engine/gpu_clocks.h), of the sampler
// where NVML cannot sample (no driver on the CI machine: it says why and a measurement goes on), and
// of the commands' clock JSON and cautions between rows (tools/cli/clock_report.h).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/gpu_clocks.h"
#include "tests/support/catch.h"
#include "tools/cli/clock_report.h"

using namespace sg;

TEST_CASE("clock summary: medians, the SM clock's range and the reasons it was held down", "[clocks]") {
  std::vector<ClockSample> s = {{1980, 3201, 650000, kClockPowerCap},
                                {1755, 3201, 700000, kClockPowerCap | kClockSwThermal},
                                {1980, 3201, 400000, kClockIdle},
                                {1830, 2619, 690000, 0}};
  const ClockSummary c = summarize_clocks(s);
  CHECK(c.samples == 4);
  CHECK(c.sm_min == 1755);
  CHECK(c.sm_max == 1980);
  CHECK(c.sm_median == 1830);  // the lower middle value of 1755, 1830, 1980, 1980
  CHECK(c.mem_median == 3201);
  CHECK(c.power_w_median == 650.0);
  // idle is left out; the others in bit order with their counts
  REQUIRE(c.reasons.size() == 2);
  CHECK(c.reasons[0] == std::make_pair(kClockPowerCap, size_t{2}));
  CHECK(c.reasons[1] == std::make_pair(kClockSwThermal, size_t{1}));
  CHECK(describe_clocks(c) ==
        "SM 1830 MHz median (1755 to 1980), memory 3201 MHz, 650 W; held down by: power cap in 2 of 4 samples, "
        "software thermal slowdown in 1 of 4 samples");
  s.resize(1);
  s[0].reasons = 0;
  CHECK(describe_clocks(summarize_clocks(s)) ==
        "SM 1980 MHz median (1980 to 1980), memory 3201 MHz, 650 W; no clock limit reported");
  CHECK(summarize_clocks({}).samples == 0);
  CHECK(describe_clocks(summarize_clocks({})) == "no samples");
}

TEST_CASE("clock reasons: every named bit has its name, others their value", "[clocks]") {
  CHECK(clock_reason_name(kClockHwSlowdown) == "hardware slowdown");
  CHECK(clock_reason_name(kClockHwThermal) == "hardware thermal slowdown");
  CHECK(clock_reason_name(kClockPowerBrake) == "power brake");
  CHECK(clock_reason_name(kClockAppSetting) == "application clock setting");
  CHECK(clock_reason_name(uint64_t{1} << 40) == "reason 0x10000000000");
}

TEST_CASE("clock comparison: SM medians 5% apart, or 1% with disjoint ranges, or a limit a quarter apart", "[clocks]") {
  auto at = [](unsigned sm, int capped, int n) {  // n samples at `sm`, the first `capped` of them at the power cap
    std::vector<ClockSample> s(n, ClockSample{sm, 3201, 600000, 0});
    for (int i = 0; i < capped; ++i) s[i].reasons = kClockPowerCap;
    return summarize_clocks(s);
  };
  CHECK(compare_clocks(at(1980, 0, 10), at(1980, 0, 10)).empty());
  CHECK(compare_clocks(at(1980, 0, 10), at(1965, 2, 10)).empty());       // 0.8% apart, 20% of the samples capped
  CHECK(compare_clocks(at(1980, 0, 10), summarize_clocks({})).empty());  // nothing to compare with
  CHECK(compare_clocks(at(1980, 0, 10), at(1950, 0, 10)) ==
        "the clocks differed between the measurements (SM clock medians 1980 MHz (A) and 1950 MHz (B))");
  CHECK(compare_clocks(at(1485, 10, 10), at(1485, 0, 10), "old", "new") ==
        "the clocks differed between the measurements (power cap in 100% of old's samples and 0% of new's)");
  const std::string both = compare_clocks(at(1980, 0, 4), at(1485, 4, 4));
  CHECK(both.find("SM clock medians 1980 MHz (A) and 1485 MHz (B); power cap in 0% of A's samples and 100% of B's") !=
        std::string::npos);
  // Both held by the power cap, the clock wandering: medians one 15 MHz step apart are alike, 7% apart
  // are not (as measured: 1440 (1305 to 1575) against 1455 (1395 to 1665) MHz).
  auto ranged = [](unsigned median, unsigned lo, unsigned hi) {
    return summarize_clocks({{lo, 2619, 698000, kClockPowerCap},
                             {median, 2619, 698000, kClockPowerCap},
                             {hi, 2619, 698000, kClockPowerCap}});
  };
  CHECK(compare_clocks(ranged(1440, 1305, 1575), ranged(1455, 1395, 1665)).empty());
  CHECK(compare_clocks(ranged(1485, 1215, 1965), ranged(1600, 1400, 1700)) ==
        "the clocks differed between the measurements (SM clock medians 1485 MHz (A) and 1600 MHz (B))");
  // Reasons that do not limit the clock (the application clock setting, sync boost) do not count.
  std::vector<ClockSample> app(4, ClockSample{1980, 3201, 600000, kClockAppSetting | kClockSyncBoost});
  CHECK(compare_clocks(at(1980, 0, 4), summarize_clocks(app)).empty());
}

TEST_CASE("clock sampler: unavailable, it says why and samples nothing, else it samples at once", "[clocks]") {
  ClockSampler c(0, 5);
  CHECK(c.available() == c.unavailable_reason().empty());
  c.start();
  const std::vector<ClockSample> got = c.stop();
  if (!c.available()) {
    INFO(c.unavailable_reason());
    CHECK(got.empty());
  } else {
    CHECK(!got.empty());  // one sample at start
    CHECK(got.front().sm_mhz > 0);
  }
  CHECK(c.stop().empty());  // stopped twice: nothing more
  // A summary only where the sampler can sample; JSON null otherwise.
  CHECK(c.summarize(got).has_value() == c.available());
  CHECK(sg::cli::clocks_json(c.summarize(got)).is_null() == !c.available());
}

TEST_CASE("clock reasons: a name back to its bit", "[clocks]") {
  for (uint64_t bit :
       {kClockIdle, kClockPowerCap, kClockHwSlowdown, kClockSwThermal, kClockHwThermal, kClockPowerBrake})
    CHECK(clock_reason_bit(clock_reason_name(bit)) == bit);
  CHECK(clock_reason_bit("reason 0x10000000000") == uint64_t{1} << 40);
  CHECK(clock_reason_bit("no such reason") == 0);
}

TEST_CASE("clock cautions: each row against the first, rows without samples left out", "[clocks]") {
  auto at = [](unsigned sm, uint64_t reasons) {
    return summarize_clocks(std::vector<ClockSample>(4, ClockSample{sm, 3201, 600000, reasons}));
  };
  using sg::cli::NamedClocks;
  CHECK(sg::cli::clock_cautions({}).empty());
  CHECK(sg::cli::clock_cautions({{"fast", at(1980, 0)}, {"grid", at(1980, 0)}}).empty());
  const auto c = sg::cli::clock_cautions({{"scan", at(1980, 0)},
                                          {"mma", at(1980, 0)},
                                          {"wgmma", at(1755, kClockPowerCap)},
                                          {"none", summarize_clocks({})}});
  REQUIRE(c.size() == 1);
  CHECK(c[0] ==
        "wgmma: the clocks differed between the measurements (SM clock medians 1980 MHz (scan) and 1755 MHz (wgmma); "
        "power cap in 0% of scan's samples and 100% of wgmma's)");
  CHECK(sg::cli::clock_cautions({{"none", summarize_clocks({})}, {"mma", at(1755, kClockPowerCap)}}).empty());
  const nlohmann::json j = sg::cli::clocks_json(at(1755, kClockPowerCap | kClockSwThermal));
  CHECK(j.at("samples") == 4);
  CHECK(j.at("sm_mhz").at("min") == 1755);
  CHECK(j.at("held_down").at("power cap") == 4);
  CHECK(j.at("held_down").at("software thermal slowdown") == 4);
}

TEST_CASE("clock limit note: only where a limit held the clock in a quarter of the samples or more", "[clocks]") {
  std::vector<ClockSample> s(8, ClockSample{1980, 3201, 560000, 0});
  CHECK(clock_limit_note(summarize_clocks(s)).empty());
  CHECK(clock_limit_note(summarize_clocks({})).empty());
  s[0].reasons = kClockPowerCap;  // 1 of 8: not enough
  CHECK(clock_limit_note(summarize_clocks(s)).empty());
  s[1].reasons = kClockPowerCap | kClockHwThermal;  // 2 of 8 power cap: a quarter
  for (auto& x : s) x.sm_mhz = 1485;
  CHECK(clock_limit_note(summarize_clocks(s)) == "SM 1485 MHz median, held down by the power cap");
  s[2].reasons = kClockHwThermal;
  CHECK(clock_limit_note(summarize_clocks(s)) ==
        "SM 1485 MHz median, held down by the power cap and hardware thermal slowdown");
  for (auto& x : s) x.reasons = kClockAppSetting;  // not a limit
  CHECK(clock_limit_note(summarize_clocks(s)).empty());
}
