// GPU tests of `--arms tune` (ModelStepOptions::tune_arms, models/model_step_tune.cpp):
// - every graph key gets its own timed choice, recorded in its manifest (one arm kept per op
//   searched; the manifest's arms are the key's arms, and its nodes run them);
// - tuning leaves every cache zeroed;
// - a tuned step gives the bytes of the untuned step (arms are byte-identical), prefill and decode;
// - an op named by the user (fixed_ops) is never searched.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/contracts.h"
#include "models/model_step.h"
#include "tests/gpu/model_prefill_fixture.h"
#include "tests/support/catch.h"

using namespace sg;
using namespace sg::test::mp;

namespace {

// "tiny" with GDN head dims 64: gdn.decode has a fused arm that runs, conv.fwd its k4 arms (K = 4);
// post-conv's token_tile and the fused gdn.prefill need 128 and fall back (not candidates).
Qwen35Config tuning_config() {
  Qwen35Config c = preset("tiny");
  c.gdn = GdnDims{2, 4, 64, 64, 4};
  c.validate("test");
  return c;
}

}  // namespace

TEST_CASE("arm tuning: per-key choices in the manifests, zeroed caches, the untuned bytes", "[gpu][tuning]") {
  const Qwen35Config cfg = tuning_config();
  const HostWeights w = synthetic_weights(cfg, 17);
  ModelStepOptions o = prefill_options(DType::bf16, DeltaPrefill::chunked);
  ModelStep plain(cfg, o);
  o.tune_arms = true;
  ModelStep tuned(cfg, o);
  for (ModelStep* s : {&plain, &tuned}) {
    s->load_host_weights(w);
    s->randomize_caches(4);
    s->capture_all();
  }
  const std::vector<uint8_t> caches = tuned.cache_bytes();
  CHECK(std::all_of(caches.begin(), caches.end(), [](uint8_t b) { return b == 0; }));
  const auto keys = tuned.graphs().captured();
  REQUIRE(keys.size() == tuned.keys().size() + tuned.prefill_keys().size());
  for (const GraphKey& key : keys) {
    CAPTURE(describe(key));
    const Manifest& m = tuned.graphs().manifest(key);
    CHECK(m.arms == tuned.arms_for(key).describe());
    REQUIRE_FALSE(m.tuning.empty());  // gdn.decode (decode) and conv.fwd (prefill) have two arms that run here
    std::map<std::string, int> kept;
    for (const ArmTiming& t : m.tuning) {
      CHECK(t.ms > 0);
      kept[t.op] += t.chosen;
    }
    for (const auto& [op, n] : kept) CHECK(n == 1);
    // The nodes run the kept gdn.* arm, where it runs as itself: the fused prefill is built for
    // Dk = 128 only, so here (Dk = 64) a kept `fused` (the default, never searched) runs unfused.
    const std::string fused_op = key.kind == GraphKind::prefill ? "gdn.prefill" : "gdn.decode";
    const bool fused = key.kind == GraphKind::prefill
                           ? tuned.arms_for(key).gdn_prefill == GdnPrefillArm::fused &&
                                 gdn_prefill_fused_supports(cfg.gdn.Dk, cfg.gdn.Dv, cfg.gdn.K)
                           : tuned.arms_for(key).gdn_decode == GdnDecodeArm::fused;
    const bool has_fused_node = std::any_of(m.nodes.begin(), m.nodes.end(), [&](const ManifestNode& n) {
      return n.label.op == fused_op && n.label.arm == "fused";
    });
    CHECK(has_fused_node == fused);
    CHECK(plain.graphs().manifest(key).tuning.empty());
  }
  // The same inputs from the same caches: the same bytes.
  const int V = cfg.vocab;
  plain.randomize_caches(9);
  tuned.randomize_caches(9);
  const std::vector<PrefillRequest> batch = {{3, tokens_for(1, 21, V), 10}, {0, tokens_for(2, 40, V), 0}};
  const PrefillOutput pa = plain.prefill(batch, RunMode::graph), pb = tuned.prefill(batch, RunMode::graph);
  CHECK(std::memcmp(pa.logits.data(), pb.logits.data(), pa.logits.size() * sizeof(float)) == 0);
  CHECK(pa.tokens == pb.tokens);
  for (int t = 0; t < 4; ++t) {
    const std::vector<DecodeRequest> reqs = {{3, tokens_for(60 + t, 1, V)[0], 31 + t},
                                             {0, tokens_for(70 + t, 1, V)[0], 40 + t}};
    const DecodeOutput da = plain.decode(reqs, RunMode::graph), db = tuned.decode(reqs, RunMode::graph);
    CHECK(std::memcmp(da.logits.data(), db.logits.data(), da.logits.size() * sizeof(float)) == 0);
    CHECK(da.tokens == db.tokens);
  }
  CHECK(plain.cache_bytes() == tuned.cache_bytes());
}

TEST_CASE("arm tuning: an op the user chose is never searched", "[gpu][tuning]") {
  const Qwen35Config cfg = tuning_config();
  ModelStepOptions o = prefill_options(DType::bf16, DeltaPrefill::chunked);
  o.synthetic = true;
  o.tune_arms = true;
  o.arms.gdn_decode = GdnDecodeArm::fused;
  o.arms.gdn_prefill = GdnPrefillArm::unfused;
  o.fixed_ops[static_cast<size_t>(Op::gdn_decode)] = true;
  o.fixed_ops[static_cast<size_t>(Op::gdn_prefill)] = true;
  ModelStep step(cfg, o);
  step.capture_all();
  for (const GraphKey& key : step.graphs().captured()) {
    CAPTURE(describe(key));
    CHECK(step.arms_for(key).gdn_decode == GdnDecodeArm::fused);
    CHECK(step.arms_for(key).gdn_prefill == GdnPrefillArm::unfused);
    for (const ArmTiming& t : step.graphs().manifest(key).tuning) {
      CHECK(t.op != "gdn.decode");
      CHECK(t.op != "gdn.prefill");
    }
  }
}
