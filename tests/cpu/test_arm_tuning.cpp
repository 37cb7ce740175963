// CPU tests of the arm search of `--arms tune` (graphs/arm_tuning.h) with a fake step timer.
#include <map>
#include <string>
#include <vector>

#include "graphs/arm_tuning.h"
#include "tests/support/catch.h"
#include "tests/support/expect_error.h"

using namespace sg;

namespace {

// A step time from a table of per-op costs: the sum over the ops of the chosen arm's cost.
struct FakeStep {
  std::map<Op, std::vector<double>> cost;  // op -> ms per arm index
  std::vector<std::string> timed;          // every selection timed, in order
  double operator()(const ArmSelection& s) {
    timed.push_back(s.describe());
    double ms = 1.0;
    for (const auto& [op, arms] : cost) ms += arms[s.index(op)];
    return ms;
  }
};

std::vector<size_t> all_arms(Op op, const ArmSelection&) {
  std::vector<size_t> v(op_info(op).arms.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

}  // namespace

TEST_CASE("arm tuning keeps the fastest arm of each op and times each selection once", "[graphs][tuning]") {
  FakeStep step;
  step.cost[Op::postconv] = {0.5, 0.4, 0.45, 0.1};  // megablock, fast, split, token_tile
  step.cost[Op::conv_update] = {0.2, 0.3};          // grid, fast
  const Op ops[] = {Op::conv_update, Op::postconv};
  ArmSelection start;  // conv.update fast (the default), postconv fast
  start.postconv = PostconvArm::fast;
  const ArmTuning t = tune_arms(start, ops, all_arms, [&](const ArmSelection& s) { return step(s); });
  CHECK(t.arms.conv_update == ConvUpdateArm::grid);
  CHECK(t.arms.postconv == PostconvArm::token_tile);
  CHECK(t.arms.conv_fwd == start.conv_fwd);  // not searched
  // conv.update: fast (the start, first), grid; postconv: fast (already timed with grid), then
  // megablock, split, token_tile: 5 distinct selections.
  CHECK(t.timed == 5);
  CHECK(step.timed.size() == 5);
  REQUIRE(t.timings.size() == 6);
  CHECK(t.timings[0].op == "conv.update");
  CHECK(t.timings[0].arm == "fast");  // the arm chosen before the op was searched goes first
  CHECK_FALSE(t.timings[0].chosen);
  CHECK(t.timings[1].arm == "grid");
  CHECK(t.timings[1].chosen);
  CHECK(t.timings[1].ms == Approx(1.0 + 0.2 + 0.4));
  int kept = 0;
  for (const auto& x : t.timings) kept += x.chosen;
  CHECK(kept == 2);  // one per op
  const std::string d = describe_tuning(t.timings);
  CHECK(d.find("conv.update: fast 1.700 ms, grid 1.600 ms (kept); postconv: fast 1.600 ms") == 0);
  CHECK(d.find("token_tile 1.300 ms (kept)") != std::string::npos);
}

TEST_CASE("arm tuning: ties keep the arm chosen before, ops with fewer than two candidates are skipped",
          "[graphs][tuning]") {
  FakeStep step;
  step.cost[Op::postconv] = {0.4, 0.4, 0.4, 0.4};
  const Op ops[] = {Op::postconv, Op::gdn_decode};
  ArmSelection start;
  start.postconv = PostconvArm::split;
  auto only_one_for_decode = [](Op op, const ArmSelection& s) {
    return op == Op::gdn_decode ? std::vector<size_t>{0} : all_arms(op, s);
  };
  const ArmTuning t = tune_arms(start, ops, only_one_for_decode, [&](const ArmSelection& s) { return step(s); });
  CHECK(t.arms.postconv == PostconvArm::split);
  CHECK(t.arms.gdn_decode == start.gdn_decode);
  CHECK(t.timings.size() == 4);  // postconv's four arms; gdn.decode not searched
  CHECK(t.timings[0].arm == "split");
  CHECK(t.timings[0].chosen);
}

TEST_CASE("arm tuning: a negative step time is an error", "[graphs][tuning]") {
  const Op ops[] = {Op::conv_update};
  test::expect_error([&] { tune_arms(ArmSelection{}, ops, all_arms, [](const ArmSelection&) { return -1.0; }); },
                     {"arm tuning: a step time of -1 ms for "});
}
