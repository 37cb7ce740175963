// GPU tests of serving (models/scheduler.h driving models/serve_gpu.h) on ModelStep:
// - f32, the tiny preset, the CPU end-to-end test's trace (chunked prompts, slot reuse, a request
//   too long for the context): graph replay and eager runs give the same tokens for every request,
//   no step falls back to eager, all slots are free at the end, and every request's tokens equal
//   the same request run alone through the CPU reference (f32) up to its first near-tie (where the
//   reference's top-2 logit margin is within the f32 tolerance);
// - bf16, a GDN shape the fused arms run (Dk = Dv = 64): the same token hash under every arm
//   selection tried (arms are byte-identical by contract, so whole serving runs are too).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/ref/mlp_ref.h"
#include "models/model_step.h"
#include "models/reference_model.h"
#include "models/scheduler.h"
#include "models/serve_gpu.h"
#include "models/serve_metrics.h"
#include "models/serve_trace.h"
#include "tests/support/catch.h"
#include "tests/support/logits.h"
#include "tests/support/serve_fixture.h"

using namespace sg;

namespace {

ModelStepOptions step_options(DType act) {
  ModelStepOptions o;
  o.num_slots = test::kServeE2eSlots;
  o.max_context = test::kServeE2eContext;
  o.max_decode_batch = test::kServeE2eSlots;
  o.max_prefill_tokens = test::kServeE2eBudget;
  o.max_prefill_seqs = test::kServeE2eSlots;
  o.act = act;
  return o;
}

// The trace on `step` with a fake clock (one millisecond per step).
ServeResult serve_on(ModelStep& step, RunMode mode, const std::vector<ServeRequest>& trace) {
  double clock = 0;
  ServeExecutor e;
  e.now_ms = [&] { return clock; };
  e.wait_until = [&](double t) { clock = std::max(clock, t); };
  e.run = [&](const ScheduledStep& s) {
    clock += 1;
    return run_model_step(step, s, mode);
  };
  return run_serve(trace, scheduler_options_for(step), e);
}

}  // namespace

TEST_CASE("serve on the GPU: graphed equals eager, and each request equals the request alone on the reference",
          "[gpu][serve]") {
  const Qwen35Config cfg = preset("tiny");
  const HostWeights weights = synthetic_weights(cfg, 11);
  const std::vector<ServeRequest> trace = test::serve_e2e_trace(cfg.vocab);
  ModelStep step(cfg, step_options(DType::f32));
  step.load_host_weights(weights);
  step.capture_all();
  const ServeResult graphed = serve_on(step, RunMode::graph, trace);
  CHECK(step.eager_fallbacks() == 0);
  const ServeResult eager = serve_on(step, RunMode::eager, trace);
  CHECK(graphed.slots_busy_at_end == 0);
  CHECK(serve_metrics(graphed).token_hash == serve_metrics(eager).token_hash);
  CHECK(serve_metrics(graphed).completed == 9);
  CHECK(serve_metrics(graphed).chunked_requests >= 4);

  ReferenceModel alone(cfg, weights, 1, test::kServeE2eContext);
  const int64_t V = cfg.vocab;
  for (size_t i = 0; i < trace.size(); ++i) {
    INFO("request " << i);
    const RequestState& st = graphed.states[i];
    CHECK(st.generated == eager.states[i].generated);
    if (i == test::kServeE2eRejected) {
      CHECK(st.phase == RequestPhase::rejected);
      continue;
    }
    REQUIRE(st.phase == RequestPhase::finished);
    alone.reset(0);
    const std::vector<int32_t> ids = prompt_tokens(trace[i]);
    std::vector<float> logits = alone.prefill({Sequence{0, std::vector<int64_t>(ids.begin(), ids.end())}});
    for (size_t t = 0; t < st.generated.size(); ++t) {
      const int64_t want = ref::argmax(logits.data(), V);
      if (st.generated[t] != want) {
        // Only a near-tie may differ: the f32 tolerance (1e-4 of the largest logit), twice.
        float scale = 0;
        for (int64_t v = 0; v < V; ++v) scale = std::max(scale, std::fabs(logits[static_cast<size_t>(v)]));
        INFO("token " << t << ": GPU " << st.generated[t] << ", reference " << want);
        CHECK(test::top2_margin(logits.data(), V) <= 2e-4f * scale);
        break;  // the sequences diverge from here
      }
      if (t + 1 < st.generated.size()) logits = alone.decode({0}, {want});
    }
  }
}

TEST_CASE("serve on the GPU: the same tokens under every arm selection", "[gpu][serve][arms]") {
  Qwen35Config c = preset("tiny");
  c.gdn = GdnDims{2, 4, 64, 64, 4};  // the fused GDN arms run at Dk = 64
  c.validate("test");
  const std::vector<ServeRequest> trace = test::serve_e2e_trace(c.vocab);
  uint64_t want = 0;
  for (const char* arms : {"", "conv.update=grid,postconv=megablock,conv.fwd=tiled", "postconv=split,conv.chunks=whole",
                           "gdn.decode=fused,gdn.prefill=fused", "conv.fwd=k4,postconv=token_tile"}) {
    INFO("arms " << arms);
    ModelStepOptions o = step_options(DType::bf16);
    o.arms = ArmSelection::parse(arms);
    o.seed = 5;
    ModelStep step(c, o);
    step.capture_all();
    const uint64_t h = serve_metrics(serve_on(step, RunMode::graph, trace)).token_hash;
    if (want == 0) want = h;
    CHECK(h == want);
  }
}
