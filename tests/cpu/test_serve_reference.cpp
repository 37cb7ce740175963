// CPU end-to-end test of serving (models/scheduler.h driving models/serve_reference.h) on the tiny
// preset in f32: requests arriving over time, more requests than slots (slots reused), prompts
// longer than the prefill budget (chunked, with history), batched prefill and decode steps, and a
// request too long for the context; every completed request's tokens must equal the same request
// run alone through ReferenceModel::generate (one whole-prompt prefill, then decode steps).
#include <algorithm>
#include <set>
#include <vector>

#include "graphs/capture_sizes.h"
#include "models/reference_model.h"
#include "models/scheduler.h"
#include "models/serve_metrics.h"
#include "models/serve_reference.h"
#include "models/serve_trace.h"
#include "models/step_metadata.h"
#include "tests/support/catch.h"
#include "tests/support/serve_fixture.h"

using namespace sg;

TEST_CASE("serve on the CPU reference: every request's tokens equal the request run alone (f32)", "[serve][e2e]") {
  const Qwen35Config cfg = preset("tiny");
  const HostWeights weights = synthetic_weights(cfg, 11);
  constexpr int kSlots = test::kServeE2eSlots, kContext = test::kServeE2eContext, kBudget = test::kServeE2eBudget;
  const std::vector<ServeRequest> trace = test::serve_e2e_trace(cfg.vocab);

  ReferenceModel model(cfg, weights, kSlots, kContext);
  SchedulerOptions o;
  o.slots = kSlots;
  o.prefill_budget = kBudget;
  o.max_context = kContext;
  o.decode_keys = decode_capture_sizes(kSlots);
  o.prefill_buckets = prefill_buckets(kBudget);
  double clock = 0;
  std::vector<ScheduledStep> steps;
  ServeExecutor exec;
  exec.now_ms = [&] { return clock; };
  exec.wait_until = [&](double t) { clock = std::max(clock, t); };
  exec.run = [&](const ScheduledStep& s) {
    steps.push_back(s);
    clock += 1;
    return run_reference_step(model, s);
  };
  const ServeResult r = run_serve(trace, o, exec);

  ReferenceModel alone(cfg, weights, 1, kContext);
  int completed = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    INFO("request " << i);
    const RequestState& st = r.states[i];
    if (i == test::kServeE2eRejected) {
      CHECK(st.phase == RequestPhase::rejected);
      CHECK(st.error.find("needs 67 cached tokens, more than the context of 64") != std::string::npos);
      continue;
    }
    REQUIRE(st.phase == RequestPhase::finished);
    const std::vector<int32_t> ids = prompt_tokens(trace[i]);
    const std::vector<int64_t> prompt(ids.begin(), ids.end());
    const std::vector<int64_t> want = alone.generate(prompt, trace[i].max_new);
    CHECK(std::vector<int64_t>(st.generated.begin(), st.generated.end()) == want);
    ++completed;
  }
  CHECK(completed == 9);
  CHECK(r.slots_busy_at_end == 0);

  // The run covered what it claims to: chunks with history, several sequences per prefill step,
  // batched decode rows, slots reused by later requests.
  bool history = false, multi_prefill = false, multi_decode = false;
  for (const ScheduledStep& s : steps) {
    if (s.kind == StepKind::prefill) {
      CHECK(s.tokens() <= kBudget);
      multi_prefill = multi_prefill || s.prefill.size() > 1;
      for (const auto& p : s.prefill) history = history || p.start_position > 0;
    } else {
      multi_decode = multi_decode || s.decode.size() > 1;
    }
  }
  CHECK(history);
  CHECK(multi_prefill);
  CHECK(multi_decode);
  const ServeMetrics m = serve_metrics(r);
  CHECK(m.chunked_requests >= 4);  // 40, 23, 17, 33 and 45 tokens over a budget of 16
  std::set<int> slots;
  for (const RequestState& st : r.states) slots.insert(st.last_slot);
  CHECK(slots == std::set<int>{-1, 0, 1, 2});  // 9 requests through 3 slots (-1: the rejected one)
}
