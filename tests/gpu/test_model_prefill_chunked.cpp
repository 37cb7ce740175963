// GPU tests of the model's prefill step with the chunked delta rule (ModelStepOptions::delta_prefill):
// - chunked matches the CPU reference (its recurrent prefill and its chunked form) across chunk
//   boundaries, with history and decode after it; the manifest shows the chunked kernel;
// - graph replay == eager bytes with the chunked kernel;
// - `auto` (the default) resolves to mma (bf16) or chunked (f32) where the kernel is built, else the scan;
// - the gated norm fused into the mma delta rule (gated_norm = delta) gives the norm kernel's bytes;
// - the wgmma form (compute capability 9.0) in a bf16 model with GDN heads of 128: within the bf16
//   tolerance of the mma form, replay == eager, labelled in the manifest;
// (the fused gdn.prefill arm in front of it: test_model_prefill.cpp's fused test runs both prefills).
#include <cstring>
#include <set>
#include <string>

#include "engine/error.h"
#include "kernels/contracts.h"
#include "kernels/delta_rule_prefill_chunked.h"
#include "kernels/delta_rule_prefill_mma.h"
#include "kernels/delta_rule_prefill_wgmma.h"
#include "models/model_step.h"
#include "models/reference_model.h"
#include "tests/gpu/model_prefill_fixture.h"
#include "tests/support/catch.h"

using namespace sg;
using namespace sg::test::mp;

// The chunked delta rule (ModelStepOptions::delta_prefill = chunked) in the model: within the same
// f32 tolerance of the CPU reference as the scan (the reference's recurrent prefill, as above, and
// its chunked form), across chunk boundaries (sequences of 70 and 90 tokens), with history and
// decode steps after it; the manifest shows the chunked kernel on every GDN layer.
TEST_CASE("model prefill with the chunked delta rule matches the CPU reference",
          "[gpu][model][prefill][delta_rule_chunked]") {
  for (const char* name : {"tiny", "tiny-dkdv"}) {
    CAPTURE(name);
    const Qwen35Config cfg = preset(name);
    const HostWeights w = synthetic_weights(cfg, 11);
    ModelStepOptions o = prefill_options(DType::f32);
    o.delta_prefill = DeltaPrefill::chunked;
    ModelStep step(cfg, o);
    step.load_host_weights(w);
    step.capture_all();
    ReferenceModel ref(cfg, w, 8, 160);
    ReferenceOptions ro;
    ro.chunked_prefill = true;
    ReferenceModel ref_chunked(cfg, w, 8, 160, ro);
    const double tol = f32_tolerance(step);
    const int V = cfg.vocab;
    for (int b : step.prefill_keys()) {
      CAPTURE(b);
      size_t chunked_nodes = 0;
      for (const auto& n : step.prefill_manifest(b).nodes) {
        if (n.label.op != "delta_rule.prefill") continue;
        ++chunked_nodes;
        CHECK(n.label.arm == "chunked");
        CHECK(n.kernel.find("delta_rule_chunked_kernel") != std::string::npos);
        CHECK(n.grid.y == static_cast<unsigned>(o.max_prefill_seqs));
      }
      CHECK(chunked_nodes == static_cast<size_t>(cfg.num_linear_attention()));
    }
    check_prefill(step, {&ref, &ref_chunked}, {{5, 1, 0}, {1, 7, 0}, {3, 90, 0}, {0, 0, 0}}, V, tol);
    check_prefill(step, {&ref, &ref_chunked}, {{1, 2, 7}, {5, 70, 1}, {6, 9, 0}, {3, 1, 90}}, V, tol);
    check_decode_after(step, {&ref, &ref_chunked}, {1, 5, 6, 3}, {9, 71, 9, 91}, V, tol);
    CHECK(step.eager_fallbacks() == 0);
  }
}

TEST_CASE("model prefill with the chunked delta rule: graph replay is byte-identical to eager",
          "[gpu][model][prefill][graphs][delta_rule_chunked]") {
  for (DType act : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(act));
    const Qwen35Config cfg = preset("tiny-dkdv");
    ModelStepOptions o = prefill_options(act);
    o.synthetic = true;
    o.delta_prefill = DeltaPrefill::chunked;
    ModelStep step(cfg, o);
    step.capture_all();
    step.randomize_caches(3);
    const int V = cfg.vocab;
    check_prefill_replay(step,
                         {{3, tokens_for(1, 21, V), 10}, {0, tokens_for(2, 2, V), 30}, {6, tokens_for(3, 80, V), 0}});
    CHECK(step.eager_fallbacks() == 0);
  }
}

// The default, `auto`, resolves in the constructor: for bf16 steps the tensor-core kernel, for f32
// steps the chunked kernel, where the kernel is built for Dk (and fits the device), the scan
// elsewhere; the manifest shows what runs. An explicit chunked or mma for an unsupported Dk is an
// error when the step has prefill, and nothing without.
TEST_CASE("model prefill: delta_prefill auto picks mma (bf16) or chunked (f32) where built, else the scan",
          "[gpu][model][prefill][delta_rule_chunked]") {
  CHECK(ModelStepOptions{}.delta_prefill == DeltaPrefill::automatic);
  CHECK(parse_delta_prefill("auto") == DeltaPrefill::automatic);
  CHECK_THROWS_AS(parse_delta_prefill("fast"), Error);
  struct Case {
    int Dk;
    DType act;
    DeltaPrefill want;
  };
  for (auto [Dk, act, want] : {Case{32, DType::bf16, DeltaPrefill::mma}, Case{32, DType::f32, DeltaPrefill::chunked},
                               Case{16, DType::bf16, DeltaPrefill::scan}}) {
    CAPTURE(Dk, dtype_name(act));
    Qwen35Config cfg = preset("tiny");
    cfg.gdn = GdnDims{2, 4, Dk, 32, 4};
    cfg.validate("test");
    REQUIRE(delta_rule_prefill_chunked_supports(Dk, 32) == (want != DeltaPrefill::scan));
    REQUIRE(delta_rule_prefill_mma_supports(Dk, 32) == (want != DeltaPrefill::scan));
    ModelStepOptions o = prefill_options(act, DeltaPrefill::automatic);
    o.synthetic = true;
    ModelStep step(cfg, o);
    CHECK(step.options().delta_prefill == want);
    step.capture_all();
    size_t nodes = 0;
    for (const auto& n : step.prefill_manifest(step.prefill_keys().back()).nodes) {
      if (n.label.op != "delta_rule.prefill") continue;
      ++nodes;
      CHECK(n.label.arm == delta_prefill_name(want));
    }
    CHECK(nodes == static_cast<size_t>(cfg.num_linear_attention()));
    if (want == DeltaPrefill::scan) {
      o.delta_prefill = DeltaPrefill::mma;
      CHECK_THROWS_AS(ModelStep(cfg, o), Error);
      o.delta_prefill = DeltaPrefill::chunked;
      CHECK_THROWS_AS(ModelStep(cfg, o), Error);
      o.max_prefill_tokens = 0;  // no prefill step: nothing to refuse
      CHECK(ModelStep(cfg, o).options().delta_prefill == DeltaPrefill::chunked);
    }
  }
}

// The gated norm fused into the mma delta rule's output (gated_norm = delta) gives the norm
// kernel's bytes: tiny with Dk = Dv = 64 (the fused form needs Dv 64 or 128), bf16, two prefills
// (the second with history and a new sequence, fewer tokens than its bucket, so rows past the live
// count too), graphed and eager against the graphed unfused step; logits, tokens and caches; the
// manifest shows the fused node and no norm node on every GDN layer.
TEST_CASE("model prefill: the gated norm in the mma delta rule gives the norm kernel's bytes",
          "[gpu][model][prefill][gated_norm][delta_rule_mma]") {
  Qwen35Config cfg = preset("tiny");
  cfg.gdn = GdnDims{2, 4, 64, 64, 4};
  cfg.validate("test");
  const HostWeights w = synthetic_weights(cfg, 17);
  const int V = cfg.vocab, G = cfg.num_linear_attention();
  struct Run {
    std::vector<PrefillOutput> out;
    std::vector<uint8_t> caches;
  };
  auto run = [&](GatedNormMode mode, RunMode rm) {
    ModelStepOptions o = prefill_options(DType::bf16, DeltaPrefill::mma);
    o.gated_norm = mode;
    ModelStep step(cfg, o);
    step.load_host_weights(w);
    step.capture_all();
    const bool fused = mode == GatedNormMode::delta;
    for (int key : step.prefill_keys()) {
      CAPTURE(key, gated_norm_name(mode));
      int norms = 0, fused_nodes = 0;
      for (const auto& n : step.prefill_manifest(key).nodes) {
        norms += n.label.op == "gated_rmsnorm";
        fused_nodes += n.label.op == "delta_rule.prefill" && n.label.arm == "mma+gated_rmsnorm";
      }
      CHECK(norms == (fused ? 0 : G));
      CHECK(fused_nodes == (fused ? G : 0));
    }
    Run r;
    r.out.push_back(step.prefill({{1, tokens_for(1, 20, V), 0}, {3, tokens_for(3, 9, V), 0}}, rm));
    r.out.push_back(step.prefill(
        {{1, tokens_for(1, 70, V, 20), 20}, {3, tokens_for(3, 41, V, 9), 9}, {5, tokens_for(5, 3, V), 0}}, rm));
    r.caches = step.cache_bytes();
    return r;
  };
  const Run want = run(GatedNormMode::kernel, RunMode::graph);
  for (RunMode rm : {RunMode::graph, RunMode::eager}) {
    CAPTURE(rm == RunMode::graph ? "graph" : "eager");
    const Run got = run(GatedNormMode::delta, rm);
    for (size_t i = 0; i < want.out.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got.out[i].logits.size() == want.out[i].logits.size());
      CHECK(std::memcmp(got.out[i].logits.data(), want.out[i].logits.data(), want.out[i].logits.size() * 4) == 0);
      CHECK(got.out[i].tokens == want.out[i].tokens);
    }
    CHECK(got.caches == want.caches);
  }
}

// The warpgroup delta rule (delta_prefill = wgmma, automatic's choice where it runs; compute
// capability 9.0, Dk = Dv = 128) in the bf16 model: "tiny" with GDN heads of 128, prefills across 64-token chunks and
// with history, then decode steps, against the same steps with mma. The two forms differ in f32 summation order only
// (each within 1e-4 of the double reference, test_delta_rule_prefill_wgmma.cpp), so the logits agree within the bf16
// model tolerance (a bf16 rounding that flips propagates); graph replay equals eager with wgmma; the manifest shows the
// kernel on every GDN layer. The same for the two-kernel form (wgmma-t: its T kernel and its recurrence on every GDN
// layer, its chunk records in the arena).
TEST_CASE("model prefill with the wgmma delta rule: within the bf16 tolerance of mma, replay == eager",
          "[gpu][model][prefill][delta_rule_wgmma]") {
  const DeviceLimits dev = DeviceLimits::current();
  if (!delta_rule_prefill_wgmma_device(dev.cc_major, dev.cc_minor)) {
    WARN("the wgmma delta-rule prefill runs on compute capability 9.0 only: not tested on this device");
    return;
  }
  Qwen35Config cfg = preset("tiny");
  cfg.gdn = GdnDims{2, 4, 128, 128, 4};
  cfg.validate("test");
  const HostWeights w = synthetic_weights(cfg, 17);
  const int V = cfg.vocab;
  auto run = [&](DeltaPrefill dp) {
    ModelStep step(cfg, prefill_options(DType::bf16, dp));
    REQUIRE(step.options().delta_prefill == dp);
    step.load_host_weights(w);
    step.capture_all();
    size_t labelled = 0, t_nodes = 0;
    for (const auto& n : step.prefill_manifest(step.prefill_keys().back()).nodes) {
      if (n.label.op != "delta_rule.prefill") continue;
      const bool t = n.kernel.find("delta_chunk_t_kernel") != std::string::npos;  // wgmma-t's first kernel
      const std::string name = delta_prefill_name(dp);  // the arm, or it + "+gated_rmsnorm" (mma)
      const bool named = n.label.arm == name || n.label.arm.rfind(name + "+", 0) == 0;
      labelled += !t && named;  // the recurrence: one a layer
      if (dp == DeltaPrefill::wgmma) CHECK(n.kernel.find("delta_rule_wgmma_kernel") != std::string::npos);
      if (dp == DeltaPrefill::wgmma_t) {
        CHECK((t || n.kernel.find("delta_rule_wgmma_t_kernel") != std::string::npos));
        t_nodes += t && named;
      }
    }
    CHECK(labelled == static_cast<size_t>(cfg.num_linear_attention()));
    if (dp == DeltaPrefill::wgmma_t) CHECK(t_nodes == static_cast<size_t>(cfg.num_linear_attention()));
    std::vector<float> logits;
    auto keep = [&](const std::vector<float>& l) { logits.insert(logits.end(), l.begin(), l.end()); };
    keep(step.prefill({{1, tokens_for(1, 70, V), 0}, {3, tokens_for(3, 9, V), 0}}, RunMode::graph).logits);
    keep(step.prefill({{1, tokens_for(1, 40, V, 70), 70}, {3, tokens_for(3, 80, V, 9), 9}}, RunMode::graph).logits);
    for (int t = 0; t < 3; ++t) {
      const std::vector<DecodeRequest> reqs = {{1, tokens_for(200 + t, 1, V)[0], 110 + t},
                                               {3, tokens_for(300 + t, 1, V)[0], 89 + t}};
      keep(step.decode(reqs, RunMode::graph).logits);
    }
    if (dp != DeltaPrefill::mma) {
      check_prefill_replay(
          step, {{5, tokens_for(5, 100, V), 0}, {6, tokens_for(6, 3, V), 0}, {1, tokens_for(1, 5, V, 113), 113}});
    }
    CHECK(step.eager_fallbacks() == 0);
    return logits;
  };
  const std::vector<float> m = run(DeltaPrefill::mma);
  for (DeltaPrefill dp : {DeltaPrefill::wgmma, DeltaPrefill::wgmma_t}) {
    const std::vector<float> g = run(dp);
    REQUIRE(m.size() == g.size());
    const double e = normalised_error(g.data(), m.data(), m.size());
    WARN(delta_prefill_name(dp) << " vs mma delta rule in the bf16 model: normalised max logit error " << e);
    CHECK(e <= 3e-2);  // the bf16 model tolerance (test_model_prefill.cpp)
  }
}
