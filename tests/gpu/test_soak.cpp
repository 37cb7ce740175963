// GPU tests of the soak run (models/soak_gpu.h) on the tiny preset (bf16, synthetic weights):
// - 2000 graphed decode replays of 8 rows in periods of 100: every replay's tokens equal the eager
//   reference period's, no eager fallback, memory flat; a second run gives the same hashes; a batch
//   of 5 rows runs through the padded key 8;
// - caches overwritten in the middle of a period fail the run at a replay of that period;
// - device memory or host RSS taken during the run fail it at the next memory sample;
// - a stop request ends the run after the current replay, with what was measured kept (also one
//   during the eager reference pass: no replay, no sample);
// - with a prompt, every period starts with a graphed prefill whose tokens equal the eager
//   reference prefill's.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "models/model_step.h"
#include "models/soak.h"
#include "models/soak_gpu.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

constexpr int kRows = 8;
constexpr int kPeriod = 100;

// A captured step of the tiny preset for kRows rows and kPeriod positions.
std::unique_ptr<ModelStep> tiny_step() {
  ModelStepOptions o = soak_step_options(kRows, kPeriod);
  o.act = DType::bf16;
  o.seed = 5;
  auto step = std::make_unique<ModelStep>(preset("tiny"), o);
  step->capture_all(/*for_timing=*/false, /*prefill=*/false);
  return step;
}

SoakOptions options(int64_t replays) {
  SoakOptions o;
  o.replays = replays;
  o.period = kPeriod;
  o.check_every = 250;
  o.rows = kRows;
  return o;
}

}  // namespace

TEST_CASE("soak: 2000 graphed decode replays of the tiny preset keep their tokens and their memory", "[gpu][soak]") {
  const auto owned = tiny_step();
  ModelStep& step = *owned;
  const SoakResult r = run_soak(step, options(2000));
  INFO(r.failure);
  REQUIRE(r.ok());
  CHECK(r.status() == "ok");
  CHECK_FALSE(r.interrupted);
  CHECK(r.replays_done == 2000);
  CHECK(r.reference_steps == kPeriod);
  CHECK(r.periods_completed == 20);
  CHECK(r.eager_fallbacks == 0);
  CHECK(r.key == kRows);
  CHECK(r.distinct_tokens > 1);  // the greedy tokens do not collapse to one id (the check would be weak)
  // Samples after replay 0 (the baseline), then after every 250th replay: 249, 499, ..., 1999.
  REQUIRE(r.samples.size() == 9);
  CHECK(r.samples.front().replay == 0);
  CHECK(r.samples.back().replay == 1999);
  CHECK(r.memory.device().peak_growth() <= static_cast<int64_t>(r.memory.tolerance().device_bytes));
  CHECK(r.memory.host().peak_growth() <= static_cast<int64_t>(r.memory.tolerance().host_bytes));
  CHECK(r.memory.device().min > 0);
  CHECK(r.memory.host().min > 0);

  // The same run again on the same step: the same tokens.
  const SoakResult again = run_soak(step, options(2000));
  CHECK(again.ok());
  CHECK(again.reference_hash == r.reference_hash);
  CHECK(again.run_hash == r.run_hash);

  // 5 rows run through the padded key 8; a run shorter than its period checks what it runs.
  SoakOptions five = options(300);
  five.rows = 5;
  const SoakResult p = run_soak(step, five);
  INFO(p.failure);
  CHECK(p.ok());
  CHECK(p.key == 8);
  CHECK(p.replays_done == 300);
  SoakOptions short_run = options(40);
  const SoakResult s = run_soak(step, short_run);
  CHECK(s.ok());
  CHECK(s.reference_steps == 40);
  CHECK(s.periods_completed == 0);
}

TEST_CASE("soak with a prompt: every period starts with a graphed prefill whose tokens equal the reference's",
          "[gpu][soak]") {
  // 4 rows, prompts of 12 tokens, periods of 20 decode replays after them: 5 periods.
  constexpr int kPrompt = 12, kShortPeriod = 20;
  ModelStepOptions mo = soak_step_options(4, kShortPeriod, kPrompt);
  CHECK(mo.max_context == kShortPeriod + kPrompt);
  CHECK(mo.max_prefill_tokens == 4 * kPrompt);
  mo.act = DType::bf16;
  mo.seed = 6;
  ModelStep step(preset("tiny"), mo);
  step.capture_all(/*for_timing=*/false, /*prefill=*/true);
  SoakOptions o;
  o.replays = 100;
  o.period = kShortPeriod;
  o.check_every = 25;
  o.rows = 4;
  o.prompt = kPrompt;
  const SoakResult r = run_soak(step, o);
  INFO(r.failure);
  REQUIRE(r.ok());
  CHECK(r.prompt == kPrompt);
  CHECK(r.prefills_done == 5);
  CHECK(r.periods_completed == 5);
  CHECK(r.eager_fallbacks == 0);
  CHECK(r.distinct_tokens > 1);
  // Without the prompt the same step gives other tokens (the prefill is not a no-op).
  SoakOptions plain = o;
  plain.prompt = 0;
  const SoakResult q = run_soak(step, plain);
  CHECK(q.ok());
  CHECK(q.reference_hash != r.reference_hash);
  // A prompt the step's prefill or context cannot hold is refused before anything runs.
  SoakOptions too_long = o;
  too_long.prompt = kPrompt + 1;
  CHECK_THROWS_AS(run_soak(step, too_long), Error);
  // A step captured without its prefill graphs: the first period's prefill runs eagerly, a failure.
  ModelStep no_prefill(preset("tiny"), mo);
  no_prefill.capture_all(/*for_timing=*/false, /*prefill=*/false);
  const SoakResult f = run_soak(no_prefill, o);
  CHECK_FALSE(f.ok());
  CHECK(f.failure.find("the prompt's prefill ran eagerly") != std::string::npos);
  CHECK(f.failed_replay == 0);
  CHECK(f.replays_done == 0);
}

TEST_CASE("soak: caches overwritten in the middle of a period fail the run at a replay of that period", "[gpu][soak]") {
  const auto owned = tiny_step();
  ModelStep& step = *owned;
  SoakOptions o = options(2000);
  o.on_replay = [&](int64_t done, double) {
    if (done == 350) step.randomize_caches(99);  // before replay 350, position 50 of period 3
  };
  const SoakResult r = run_soak(step, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status() == "failed");
  REQUIRE(r.mismatch.has_value());
  CHECK(r.failed_replay >= 350);
  CHECK(r.failed_replay < 400);
  CHECK(r.mismatch->period == 3);
  CHECK(r.replays_done == r.failed_replay + 1);
  CHECK(r.failure.find("replay " + std::to_string(r.failed_replay) + " (period 3") != std::string::npos);
}

TEST_CASE("soak: memory taken during the run fails it at the next memory sample", "[gpu][soak]") {
  const auto owned = tiny_step();
  ModelStep& step = *owned;
  {
    std::optional<DeviceBuffer> held;
    SoakOptions o = options(2000);
    o.on_replay = [&](int64_t done, double) {
      if (done == 500) held.emplace(size_t{64} << 20);
    };
    const SoakResult r = run_soak(step, o);
    REQUIRE_FALSE(r.ok());
    CHECK_FALSE(r.mismatch.has_value());
    CHECK(r.failed_replay == 749);
    CHECK(r.failure.find("after replay 749: device memory in use grew by") != std::string::npos);
  }
  {
    std::vector<char> held;
    SoakOptions o = options(2000);
    o.on_replay = [&](int64_t done, double) {
      if (done == 500) held.assign(size_t{64} << 20, 1);  // written: resident
    };
    const SoakResult r = run_soak(step, o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.failed_replay == 749);
    CHECK(r.failure.find("after replay 749: host resident memory (RSS) grew by") != std::string::npos);
  }
}

TEST_CASE("soak: a stop request ends the run after the current replay and keeps what was measured", "[gpu][soak]") {
  const auto owned = tiny_step();
  ModelStep& step = *owned;
  bool stop = false;
  SoakOptions o = options(2000);
  o.stop = [&] { return stop; };
  o.on_replay = [&](int64_t done, double) { stop = stop || done == 300; };
  const SoakResult r = run_soak(step, o);
  INFO(r.failure);
  CHECK(r.ok());
  CHECK(r.interrupted);
  CHECK(r.status() == "interrupted");
  CHECK(r.replays_done == 300);
  REQUIRE(r.samples.size() == 3);  // after replays 0, 249 and the last one, 299
  CHECK(r.samples.back().replay == 299);
  CHECK(r.periods_completed == 3);

  // Stopped during the eager reference: no replay ran and nothing was sampled.
  SoakOptions early = options(2000);
  early.stop = [] { return true; };
  const SoakResult e = run_soak(step, early);
  CHECK(e.ok());
  CHECK(e.interrupted);
  CHECK(e.reference_steps == 1);
  CHECK(e.replays_done == 0);
  CHECK(e.samples.empty());
  CHECK(e.memory.samples() == 0);
}
