// CPU tests of the serving scheduler (models/scheduler.h) with a fake executor and a fake clock:
// admission in arrival order, slot reuse, chunked prefill under the token budget, decode rows
// feeding back their tokens, padded keys, no starvation either way, all slots free at the end, a
// request that can never fit rejected while the others complete, times and metrics.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/scheduler.h"
#include "models/serve_metrics.h"
#include "tests/support/catch.h"
#include "tests/support/serve_fixture.h"

using namespace sg;

namespace {

// A request whose prompt ids are 0, 1, 2, ... (mod 97).
ServeRequest req(int prompt_len, int max_new, double arrival_ms = 0) {
  ServeRequest q = test::serve_request(prompt_len, max_new, arrival_ms);
  for (int i = 0; i < prompt_len; ++i) q.prompt.push_back(i % 97);
  return q;
}

SchedulerOptions options(int slots, int budget, int context = 1 << 20) {
  SchedulerOptions o;
  o.slots = slots;
  o.prefill_budget = budget;
  o.max_context = context;
  return o;
}

// A fake executor: every step takes step_ms on a fake clock; the token of sequence / row i is
// 1000 x its request + the step index, so tests can tell which step made which token.
struct Fake {
  double clock = 0, step_ms = 1;
  std::vector<ScheduledStep> steps;
  ServeExecutor exec() {
    ServeExecutor e;
    e.now_ms = [this] { return clock; };
    e.wait_until = [this](double t) { clock = std::max(clock, t); };
    e.run = [this](const ScheduledStep& s) {
      steps.push_back(s);
      clock += step_ms;
      std::vector<int32_t> out;
      for (int r : s.requests) out.push_back(1000 * r + s.index);
      return out;
    };
    return e;
  }
};

std::vector<int32_t> tokens_for(const ScheduledStep& s) {
  std::vector<int32_t> out;
  for (int r : s.requests) out.push_back(1000 * r + s.index);
  return out;
}

bool has_phase(const Scheduler& s, RequestPhase p) {
  return std::any_of(s.states().begin(), s.states().end(), [&](const RequestState& st) { return st.phase == p; });
}

}  // namespace

TEST_CASE("scheduler: admission in arrival order (ties in trace order) into the lowest free slot",
          "[serve][scheduler]") {
  Scheduler s({req(4, 1, 5), req(4, 1, 0), req(4, 1, 0), req(4, 1, 3)}, options(2, 64));
  auto step = s.next(0);
  REQUIRE(step.has_value());
  CHECK(step->kind == StepKind::prefill);
  CHECK(step->requests == std::vector<int>{1, 2});
  CHECK(step->prefill[0].slot == 0);
  CHECK(step->prefill[1].slot == 1);
  CHECK(s.states()[3].phase == RequestPhase::pending);
  CHECK(s.next_arrival() == 3.0);
  s.complete(*step, tokens_for(*step), 1);  // max_new 1: both finish and free their slots
  CHECK(s.busy_slots() == 0);
  CHECK(!s.next(2).has_value());  // nothing has arrived
  step = s.next(6);               // 3 (arrived at 3) before 0 (arrived at 5)
  REQUIRE(step.has_value());
  CHECK(step->requests == std::vector<int>{3, 0});
  CHECK(s.states()[3].slot == 0);
  CHECK(s.states()[0].slot == 1);
  CHECK(s.states()[3].admitted_ms == 6);
}

TEST_CASE("scheduler: a request waits for a slot and reuses the freed one, first come first served",
          "[serve][scheduler]") {
  Fake f;
  const ServeResult r = run_serve({req(4, 3), req(5, 2), req(6, 4), req(3, 1)}, options(1, 64), f.exec());
  CHECK(r.slots_busy_at_end == 0);
  for (size_t i = 0; i < r.states.size(); ++i) {
    const RequestState& st = r.states[i];
    CHECK(st.phase == RequestPhase::finished);
    CHECK(st.last_slot == 0);
    CHECK(st.generated.size() == static_cast<size_t>(r.requests[i].max_new));
    if (i > 0) CHECK(st.admitted_ms >= r.states[i - 1].finished_ms);  // one after the other
  }
  for (const ScheduledStep& s : f.steps) {
    CHECK(s.requests.size() == 1);                                             // one slot: one sequence per step
    if (s.kind == StepKind::prefill) CHECK(s.prefill[0].start_position == 0);  // each prompt starts afresh
  }
}

TEST_CASE("scheduler: a length-only prompt's ids are made on admission and freed after its prefill",
          "[serve][scheduler]") {
  // Three prompts of 20 tokens for one slot (budget 8: three chunks each), and one of 2^24 tokens
  // that can never fit the context: rejected without its 64 MB of ids ever being made.
  std::vector<ServeRequest> t = {test::serve_request(20, 2), test::serve_request(kMaxTraceTokens, 1),
                                 test::serve_request(20, 2, 1), test::serve_request(20, 1, 2)};
  prepare_prompts(t, 97, 5);
  Scheduler s(t, options(1, 8, 64));
  double now = 0;
  std::map<int, int> next_start;
  while (!s.done()) {
    const auto step = s.next(now);
    REQUIRE(step.has_value());
    for (size_t r = 0; r < t.size(); ++r) {
      INFO("request " << r << " at step " << step->index);
      const RequestState& st = s.states()[r];
      // Only the request being prefilled holds ids, all of its prompt.
      CHECK(st.prompt.size() == (st.phase == RequestPhase::prefill ? static_cast<size_t>(t[r].prompt_len) : 0u));
    }
    for (size_t i = 0; i < step->prefill.size(); ++i) {
      const int q = step->requests[i];
      const std::vector<int32_t> ids = prompt_tokens(t[static_cast<size_t>(q)]);
      const auto first = ids.begin() + next_start[q];
      CHECK(step->prefill[i].tokens ==
            std::vector<int32_t>(first, first + static_cast<long>(step->prefill[i].tokens.size())));
      next_start[q] += static_cast<int>(step->prefill[i].tokens.size());
    }
    now += 1;
    s.complete(*step, tokens_for(*step), now);
  }
  CHECK(s.states()[1].phase == RequestPhase::rejected);
  for (int q : {0, 2, 3}) {
    CHECK(next_start[q] == 20);
    CHECK(s.states()[static_cast<size_t>(q)].phase == RequestPhase::finished);
    CHECK(s.states()[static_cast<size_t>(q)].prompt.empty());
  }
  // A length-only prompt the scheduler cannot make: refused when it is built.
  std::vector<ServeRequest> unprepared = {test::serve_request(3, 1)};
  CHECK_THROWS_AS(Scheduler(unprepared, options(1, 8)), Error);
}

TEST_CASE("scheduler: long prompts are prefilled in chunks under the token budget, with history",
          "[serve][scheduler]") {
  Fake f;
  SchedulerOptions o = options(4, 8);
  o.prefill_buckets = {4, 8};
  const ServeResult r = run_serve({req(20, 2), req(5, 2), req(3, 2)}, o, f.exec());
  std::map<int, int> next_start;  // request -> the position its next chunk must start at
  for (const ScheduledStep& s : f.steps) {
    if (s.kind != StepKind::prefill) continue;
    CHECK(s.tokens() <= 8);
    CHECK(s.key == (s.tokens() <= 4 ? 4 : 8));
    for (size_t i = 0; i < s.prefill.size(); ++i) {
      const int q = s.requests[i];
      CHECK(s.prefill[i].start_position == next_start[q]);
      const auto& prompt = r.requests[static_cast<size_t>(q)].prompt;
      CHECK(s.prefill[i].tokens ==
            std::vector<int32_t>(prompt.begin() + next_start[q],
                                 prompt.begin() + next_start[q] + static_cast<long>(s.prefill[i].tokens.size())));
      next_start[q] += static_cast<int>(s.prefill[i].tokens.size());
    }
  }
  CHECK(next_start[0] == 20);
  CHECK(next_start[1] == 5);
  CHECK(next_start[2] == 3);
  CHECK(r.states[0].chunks == 3);  // 8 + 8 + 4: the first two steps are full
  CHECK(f.steps[0].tokens() == 8);
  CHECK(f.steps[0].requests == std::vector<int>{0});
  const ServeMetrics m = serve_metrics(r);
  CHECK(m.chunked_requests >= 1);
  CHECK(m.max_chunks == 3);
}

TEST_CASE("scheduler: a prefill step holds at most max_prefill_seqs sequences", "[serve][scheduler]") {
  Fake f;
  SchedulerOptions o = options(8, 100);
  o.max_prefill_seqs = 3;
  run_serve({req(2, 1), req(2, 1), req(2, 1), req(2, 1), req(2, 1)}, o, f.exec());
  REQUIRE(f.steps.size() == 2);
  CHECK(f.steps[0].requests == std::vector<int>{0, 1, 2});
  CHECK(f.steps[1].requests == std::vector<int>{3, 4});
}

TEST_CASE("scheduler: decode rows feed back each request's last token at the next position, keys padded",
          "[serve][scheduler]") {
  Fake f;
  SchedulerOptions o = options(4, 64);
  o.decode_keys = {1, 2, 4};
  const ServeResult r = run_serve({req(3, 4), req(2, 4), req(5, 4)}, o, f.exec());
  std::map<int, int32_t> last;  // request -> its last token
  std::map<int, int> made;      // request -> tokens made
  for (const ScheduledStep& s : f.steps) {
    const std::vector<int32_t> toks = tokens_for(s);
    if (s.kind == StepKind::decode) {
      CHECK(s.key == (s.decode.size() <= 2 ? static_cast<int>(s.decode.size()) : 4));
      for (size_t i = 0; i < s.decode.size(); ++i) {
        const int q = s.requests[i];
        CHECK(s.decode[i].token == last[q]);
        CHECK(s.decode[i].position == r.requests[static_cast<size_t>(q)].prompt_len + made[q] - 1);
        CHECK(s.decode[i].slot == r.states[static_cast<size_t>(q)].last_slot);
        if (i > 0) CHECK(s.decode[i].slot > s.decode[i - 1].slot);  // slot order
      }
    }
    for (size_t i = 0; i < s.requests.size(); ++i) {
      last[s.requests[i]] = toks[i];
      ++made[s.requests[i]];
    }
  }
  for (size_t q = 0; q < r.states.size(); ++q) {
    CHECK(r.states[q].generated.size() == 4);
    CHECK(r.states[q].generated.back() == last[static_cast<int>(q)]);
  }
  CHECK(f.steps.front().key == 10);  // no buckets: the live token count
}

TEST_CASE("scheduler: no starvation: with both kinds of work waiting, prefill and decode steps alternate",
          "[serve][scheduler]") {
  for (int streak : {1, 2}) {
    INFO("max_prefill_streak " << streak);
    SchedulerOptions o = options(4, 8);
    o.max_prefill_streak = streak;
    // One long decode, then long prompts (chunked) arriving while it decodes.
    std::vector<ServeRequest> trace = {req(4, 40)};
    for (int i = 0; i < 6; ++i) trace.push_back(req(30, 3, 2.0 + 3 * i));
    Scheduler s(trace, o);
    double now = 0;
    int prefills_in_a_row = 0, decodes_in_a_row = 0, decodes_while_prefill = 0, prefills_while_decode = 0;
    while (!s.done()) {
      auto step = s.next(now);
      if (!step) {
        now = *s.next_arrival();
        continue;
      }
      const bool decoding = has_phase(s, RequestPhase::decode), prefilling = has_phase(s, RequestPhase::prefill);
      if (step->kind == StepKind::prefill) {
        prefills_in_a_row = decoding ? prefills_in_a_row + 1 : 0;
        decodes_in_a_row = 0;
        CHECK(prefills_in_a_row <= streak);
        prefills_while_decode += decoding;
      } else {
        decodes_in_a_row = prefilling ? decodes_in_a_row + 1 : 0;
        prefills_in_a_row = 0;
        CHECK(decodes_in_a_row <= 1);
        decodes_while_prefill += prefilling;
      }
      now += 1;
      s.complete(*step, tokens_for(*step), now);
    }
    CHECK(decodes_while_prefill > 5);  // decode made progress while prompts waited
    CHECK(prefills_while_decode > 5);  // and prefill while requests decoded
    CHECK(s.busy_slots() == 0);
  }
}

TEST_CASE("scheduler: a request that can never fit is rejected with an error, the others complete",
          "[serve][scheduler]") {
  Fake f;
  // Context 16: 10 + 7 - 1 = 16 fits exactly; 10 + 8 - 1 = 17 cannot.
  const ServeResult r =
      run_serve({req(10, 7), req(10, 8, 1), req(3, 2, 2), req(17, 1, 3)}, options(2, 4, 16), f.exec());
  CHECK(r.states[0].phase == RequestPhase::finished);
  CHECK(r.states[0].generated.size() == 7);
  CHECK(r.states[1].phase == RequestPhase::rejected);
  CHECK(r.states[1].error ==
        "prompt of 10 tokens + 8 new tokens needs 17 cached tokens, more than the context of 16 tokens per slot, so it "
        "can never run");
  CHECK(r.states[1].last_slot == -1);
  CHECK(r.states[2].phase == RequestPhase::finished);
  CHECK(r.states[3].phase == RequestPhase::rejected);
  CHECK(r.slots_busy_at_end == 0);
  for (const ScheduledStep& s : f.steps) {
    for (int q : s.requests) CHECK((q == 0 || q == 2));
  }
  const ServeMetrics m = serve_metrics(r);
  CHECK(m.completed == 2);
  CHECK(m.rejected == 2);
  CHECK(format_metrics(m, r).find("rejected: request 1: prompt of 10 tokens") != std::string::npos);

  Fake g;  // every request rejected: the run ends at once
  const ServeResult none = run_serve({req(40, 1), req(40, 1, 5)}, options(2, 4, 16), g.exec());
  CHECK(g.steps.empty());
  CHECK(none.states[1].phase == RequestPhase::rejected);
}

TEST_CASE("scheduler: times on the executor's clock, and the metrics", "[serve][scheduler]") {
  Fake f;
  f.step_ms = 2;
  // Request 0: prompt 4 (one prefill step) then 2 decode steps; request 1 arrives at 100 ms (the
  // clock jumps there while the scheduler is idle).
  const ServeResult r = run_serve({req(4, 3), req(6, 2, 100)}, options(2, 8), f.exec());
  const RequestState& a = r.states[0];
  CHECK(a.admitted_ms == 0);
  CHECK(a.first_token_ms == 2);
  CHECK(a.finished_ms == 6);
  const RequestState& b = r.states[1];
  CHECK(b.admitted_ms == 100);
  CHECK(b.first_token_ms == 102);
  CHECK(b.finished_ms == 104);
  CHECK(r.wall_ms == 104);
  const ServeMetrics m = serve_metrics(r);
  CHECK(m.ttft_ms.count == 2);
  CHECK(m.ttft_ms.p50 == 2);
  CHECK(m.tpot_ms.count == 2);
  CHECK(m.tpot_ms.p99 == 2);
  CHECK(m.prompt_tokens == 10);
  CHECK(m.output_tokens == 5);
  CHECK(m.output_tokens_per_s == Approx(5 / 0.104));
  CHECK(m.all_steps.steps == 5);
  CHECK(m.steps.at({StepKind::prefill, 4}).steps == 1);
  CHECK(m.steps.at({StepKind::decode, 1}).steps == 3);
  CHECK(m.all_steps.ms == 10);
  CHECK(metrics_json(m).at("ttft_ms").at("p50") == 2.0);
  // No sample (every request rejected, or max_new 1 for the time per output token): null, not 0.
  const auto none = metrics_json(ServeMetrics{}).at("tpot_ms");
  CHECK(none.at("count") == 0);
  CHECK(none.at("p50").is_null());
  CHECK(none.at("p99").is_null());
}

TEST_CASE("scheduler: options are checked, and steps must be completed in turn", "[serve][scheduler]") {
  CHECK_THROWS_AS(Scheduler({req(2, 1)}, options(0, 8)), Error);
  CHECK_THROWS_AS(Scheduler({req(2, 1)}, options(1, 0)), Error);
  CHECK_THROWS_AS(Scheduler({req(2, 1)}, options(1, 8, 0)), Error);
  SchedulerOptions o = options(1, 8);
  o.decode_keys = {4, 2};
  CHECK_THROWS_AS(Scheduler({req(2, 1)}, o), Error);
  ServeRequest unfilled;
  unfilled.prompt_len = 3;
  unfilled.max_new = 1;
  CHECK_THROWS_AS(Scheduler({unfilled}, options(1, 8)), Error);
  Scheduler s({req(2, 2), req(2, 2)}, options(2, 8));
  auto step = s.next(0);
  REQUIRE(step.has_value());
  CHECK_THROWS_AS(s.next(0), Error);                  // the step is still in flight
  CHECK_THROWS_AS(s.complete(*step, {1}, 1), Error);  // two sequences, one token
  s.complete(*step, tokens_for(*step), 1);
  CHECK_THROWS_AS(s.complete(*step, tokens_for(*step), 1), Error);  // completed twice
}

TEST_CASE("scheduler: a stop request ends the run between steps with what was done so far", "[serve][scheduler]") {
  Fake f;
  ServeExecutor e = f.exec();
  int asked = 0;
  // One slot: request 0 takes a prefill and two decode steps (3 tokens), then request 1's prefill
  // (1 of its 2 tokens) is the fourth step; the run stops before the fifth.
  e.stop = [&] { return ++asked > 4; };
  const ServeResult r = run_serve({req(4, 3), req(5, 2), req(6, 4), req(3, 1)}, options(1, 64), e);
  CHECK(r.interrupted);
  CHECK(r.steps.size() == 4);
  CHECK(f.steps.size() == 4);
  CHECK(r.slots_busy_at_end == 1);  // request 1 holds the slot, neither finished nor rejected
  int finished = 0, unresolved = 0;
  for (const RequestState& st : r.states) {
    finished += st.phase == RequestPhase::finished;
    unresolved += st.phase != RequestPhase::finished && st.phase != RequestPhase::rejected;
  }
  CHECK(finished == 1);
  CHECK(r.states[0].phase == RequestPhase::finished);
  CHECK(unresolved == 3);
  const ServeMetrics m = serve_metrics(r);
  CHECK(m.completed == finished);  // the metrics cover the finished requests only
  Fake g;
  const ServeResult whole = run_serve({req(4, 3), req(5, 2), req(6, 4), req(3, 1)}, options(1, 64), g.exec());
  CHECK_FALSE(whole.interrupted);
  CHECK(whole.steps.size() > 3);
}

TEST_CASE("scheduler: a stop request during a wait for a late arrival ends the run within a slice",
          "[serve][scheduler]") {
  // Request 0 is done after 2 ms; request 1 arrives an hour later. A Ctrl-C at 500 ms ends the run
  // then, not after the hour (the wait is cut into slices of kStopPollMs, the hook asked between).
  Fake f;
  ServeExecutor e = f.exec();
  e.stop = [&] { return f.clock >= 500; };
  const ServeResult r = run_serve({req(4, 2), req(4, 2, 3'600'000)}, options(1, 64), e);
  CHECK(r.interrupted);
  CHECK(r.steps.size() == 2);
  CHECK(f.clock >= 500);
  CHECK(f.clock < 500 + kStopPollMs);
  CHECK(r.states[1].phase == RequestPhase::pending);
  // Without a stop hook the wait is one call, to the arrival.
  Fake g;
  const ServeResult whole = run_serve({req(4, 2), req(4, 2, 3'600'000)}, options(1, 64), g.exec());
  CHECK_FALSE(whole.interrupted);
  CHECK(whole.states[1].phase == RequestPhase::finished);
  CHECK(g.clock >= 3'600'000);
}
