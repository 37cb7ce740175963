// GPU tests of programmatic dependent launch (the `pdl` setting, kernels/launch.cuh; its names and
// resolution are tested in tests/cpu/test_step_settings.cpp):
// - a model step with PDL on gives the bytes of the same step with PDL off (logits, tokens and
//   every cache), over prefill with history and decode steps, graphed and eager, on shapes that run
//   the skinny GEMM (its weight tiles requested before the wait), the tensor-core attention decode,
//   the split argmax and every GDN kernel of the default arms; and the fused gdn.decode arm, in
//   thread-block clusters, gives the unfused bytes with PDL on and off;
// - with PDL on the captured graphs hold programmatic edges between our kernels (more than with it
//   off, where only libraries such as cuBLAS add their own).
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "engine/error.h"
#include "kernels/contracts.h"
#include "models/model_step.h"
#include "models/step_settings.h"
#include "tests/gpu/model_prefill_fixture.h"
#include "tests/support/catch.h"

using namespace sg;
using namespace sg::test::mp;

namespace {

// Edges of `graph` whose type is programmatic (PDL).
size_t programmatic_edges(cudaGraph_t graph) {
  size_t n = 0;
  check(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (n) check(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n));
  size_t p = 0;
  for (size_t i = 0; i < n; ++i) p += data[i].type == cudaGraphDependencyTypeProgrammatic;
  return p;
}

struct PdlRun {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> caches;
  size_t edges = 0;
};

// A prefill with history (positions within the random caches' length), then 6 decode steps, of a
// bf16 model step on the skinny GEMM with the given PDL mode and gdn.decode arm.
PdlRun pdl_run(const Qwen35Config& cfg, const HostWeights& w, PdlMode pdl, RunMode mode, GdnDecodeArm gdn_decode) {
  const int V = cfg.vocab;
  ModelStepOptions o = prefill_options(DType::bf16, DeltaPrefill::chunked);
  o.gemm = GemmKind::skinny;
  o.pdl = pdl;
  o.arms.gdn_decode = gdn_decode;
  ModelStep step(cfg, o);
  REQUIRE(step.options().pdl == pdl);
  step.load_host_weights(w);
  step.capture_all();
  step.randomize_caches(9);
  PdlRun r;
  for (int k : step.keys()) r.edges += programmatic_edges(step.graph(k).graph());
  for (int b : step.prefill_keys()) r.edges += programmatic_edges(step.prefill_graph(b).graph());
  const std::vector<PrefillRequest> batch = {
      {3, tokens_for(1, 21, V), 10}, {0, tokens_for(2, 2, V), 30}, {6, tokens_for(3, 40, V), 0}};
  const PrefillOutput p = step.prefill(batch, mode);
  r.logits = p.logits;
  r.tokens = p.tokens;
  const int start[3] = {31, 32, 40};
  for (int t = 0; t < 6; ++t) {
    std::vector<DecodeRequest> reqs;
    for (int i = 0; i < 3; ++i) reqs.push_back({batch[i].slot, tokens_for(50 + t, 1, V, i)[0], start[i] + t});
    const DecodeOutput d = step.decode(reqs, mode);
    r.logits.insert(r.logits.end(), d.logits.begin(), d.logits.end());
    r.tokens.insert(r.tokens.end(), d.tokens.begin(), d.tokens.end());
  }
  r.caches = step.cache_bytes();
  CHECK(step.eager_fallbacks() == 0);
  return r;
}

void check_same(const PdlRun& a, const PdlRun& b) {
  REQUIRE(a.logits.size() == b.logits.size());
  CHECK(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0);
  CHECK(a.tokens == b.tokens);
  CHECK(a.caches == b.caches);
}

}  // namespace

TEST_CASE("pdl: a model step with PDL on gives the bytes of PDL off, graphed and eager", "[gpu][pdl][model]") {
  if (DeviceLimits::current().cc_major < 9) {
    WARN("programmatic dependent launch needs sm_90+: not tested on this device");
    return;
  }
  // "tiny" with D = 64: the tensor-core attention decode; skinny GEMM for every projection.
  Qwen35Config cfg = preset("tiny");
  cfg.D = 64;
  cfg.validate("test");
  const HostWeights w = synthetic_weights(cfg, 5);
  for (RunMode mode : {RunMode::graph, RunMode::eager}) {
    CAPTURE(mode == RunMode::graph ? "graph" : "eager");
    const PdlRun off = pdl_run(cfg, w, PdlMode::off, mode, GdnDecodeArm::unfused);
    const PdlRun on = pdl_run(cfg, w, PdlMode::on, mode, GdnDecodeArm::unfused);
    check_same(off, on);
    // Our kernels' launches add programmatic edges only with PDL on (every step kind has dozens).
    CHECK(on.edges > off.edges + 20);
  }
}

TEST_CASE("pdl: the fused gdn.decode arm in clusters gives the unfused bytes with PDL on and off",
          "[gpu][pdl][model]") {
  if (DeviceLimits::current().cc_major < 9) {
    WARN("programmatic dependent launch needs sm_90+: not tested on this device");
    return;
  }
  // GDN heads with Dk = Dv = 128 and Hv/Hk = 2: the fused arm runs in clusters of 4 blocks (2
  // v-heads x 2 column blocks), launched with the cluster and the PDL attributes together.
  Qwen35Config cfg = preset("tiny");
  cfg.D = 64;
  cfg.gdn = GdnDims{2, 4, 128, 128, 4};
  cfg.validate("test");
  REQUIRE(gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{8, 2, 4, 128, 128, 4}).cluster == Dim3{4, 1, 1});
  const HostWeights w = synthetic_weights(cfg, 6);
  for (RunMode mode : {RunMode::graph, RunMode::eager}) {
    CAPTURE(mode == RunMode::graph ? "graph" : "eager");
    const PdlRun ref = pdl_run(cfg, w, PdlMode::off, mode, GdnDecodeArm::unfused);
    check_same(ref, pdl_run(cfg, w, PdlMode::off, mode, GdnDecodeArm::fused));
    check_same(ref, pdl_run(cfg, w, PdlMode::on, mode, GdnDecodeArm::fused));
  }
}
